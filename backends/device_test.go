package backends

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// memEngine is an engine that reads its device memory, as the llama engine does.
type memEngine struct {
	fakeEngine
	free, total int64
}

func (m *memEngine) DeviceMemory() (free, total int64) { return m.free, m.total }

// TestWorkerHandlerHealthDevice: /health reports the engine's device, with the
// memory read at the time of the answer when the engine can read it, else as it
// was at load; without a device, no "device" field.
func TestWorkerHandlerHealthDevice(t *testing.T) {
	dev := &Device{Name: "CUDA0", Description: "NVIDIA H200", Backend: "CUDA", GPU: true, GPULayers: 29, MemoryTotal: 1000, MemoryFree: 900}
	info := testInfo
	info.Device = dev
	for _, tt := range []struct {
		name   string
		engine Engine
		info   EngineInfo
		want   *Device
	}{
		{"fresh memory", &memEngine{free: 400, total: 1000}, info,
			&Device{Name: "CUDA0", Description: "NVIDIA H200", Backend: "CUDA", GPU: true, GPULayers: 29, MemoryTotal: 1000, MemoryFree: 400}},
		{"memory at load", &fakeEngine{}, info, dev},
		{"no device", &memEngine{free: 1, total: 2}, testInfo, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			NewWorkerHandler(tt.engine, tt.info, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
			var h Health
			if err := json.Unmarshal(rec.Body.Bytes(), &h); rec.Code != 200 || err != nil {
				t.Fatalf("/health: %d %s (%v)", rec.Code, rec.Body, err)
			}
			switch {
			case tt.want == nil && h.Device != nil:
				t.Errorf("device = %+v, want none", h.Device)
			case tt.want != nil && (h.Device == nil || !reflect.DeepEqual(*h.Device, *tt.want)):
				t.Errorf("device = %+v, want %+v", h.Device, tt.want)
			}
		})
	}
	// The wire names, which serve's /health and the docs repeat.
	b, _ := json.Marshal(dev)
	if want := `{"name":"CUDA0","description":"NVIDIA H200","backend":"CUDA","gpu":true,"gpu_layers":29,"memory_total_bytes":1000,"memory_free_bytes":900}`; string(b) != want {
		t.Errorf("device JSON = %s\nwant %s", b, want)
	}
	if got := dev.MemoryUsed(); got != 100 {
		t.Errorf("MemoryUsed = %d, want 100", got)
	}
}

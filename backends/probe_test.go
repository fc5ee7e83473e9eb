package backends

import "testing"

// TestDeviceName pins GET /info's device word for each kind of probed device.
func TestDeviceName(t *testing.T) {
	for d, want := range map[*Device]string{nil: "cpu", {Name: "CPU", Backend: "CPU"}: "cpu",
		{Name: "CUDA1", Backend: "CUDA", GPU: true}: "cuda:1", {Name: "Metal", Backend: "Metal", GPU: true}: "metal"} {
		if got := DeviceName(d); got != want {
			t.Errorf("DeviceName(%+v) = %q, want %q", d, got, want)
		}
	}
}

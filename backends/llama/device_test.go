package llama

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/hostmem"
)

func TestParseDevice(t *testing.T) {
	for _, tt := range []struct {
		in    string
		kind  string
		index int
		ok    bool
	}{
		{"", DeviceAuto, 0, true},
		{"auto", DeviceAuto, 0, true},
		{"CPU", DeviceCPU, 0, true},
		{"cuda", DeviceCUDA, 0, true},
		{"cuda:0", DeviceCUDA, 0, true},
		{"cuda:3", DeviceCUDA, 3, true},
		{" metal ", DeviceMetal, 0, true},
		{"cuda:", "", 0, false},
		{"cuda:-1", "", 0, false},
		{"cuda:x", "", 0, false},
		{"cpu:0", "", 0, false},
		{"gpu", "", 0, false},
		{"vulkan", "", 0, false},
	} {
		kind, index, err := ParseDevice(tt.in)
		if (err == nil) != tt.ok || kind != tt.kind || index != tt.index {
			t.Errorf("ParseDevice(%q) = %q, %d, %v; want %q, %d, ok %t", tt.in, kind, index, err, tt.kind, tt.index, tt.ok)
		}
	}
}

func TestIsBackendLibrary(t *testing.T) {
	for name, want := range map[string]bool{
		"libggml-cuda.so":        true,
		"libggml-vulkan.so":      true,
		"libggml-metal.dylib":    true,
		"libggml-base.so":        false, // the core the backends link against
		"libggml-base.so.0":      false,
		"libggml-cuda.so.0":      false, // a soname link of the same library
		"libggml-cpu-haswell.so": false, // the CPU backend is compiled in
		"libggml-cpu.so":         false,
		"libcudart.so.12":        false,
		"libggml-.so":            false,
		"libggml-cuda.txt":       false,
		"README":                 false,
	} {
		if got := isBackendLibrary(name); got != want {
			t.Errorf("isBackendLibrary(%q) = %t, want %t", name, got, want)
		}
	}
}

// TestNoBackendLibrary: with no GPU backend, auto runs on the CPU and says why;
// a missing default folder is no error, a missing folder given explicitly is.
func TestNoBackendLibrary(t *testing.T) {
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		t.Skip("Metal is compiled in here: auto picks it")
	}
	if err := backendInit(); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	dev, info, err := selectDevice("auto", empty, true, "")
	if err != nil || dev != nil {
		t.Fatalf("selectDevice(auto, empty folder) = %v, %+v, %v; want the CPU", dev, info, err)
	}
	if info.GPU || info.Backend != "CPU" || info.Name != "CPU" || info.GPULayers != 0 {
		t.Errorf("device = %+v, want the CPU", info)
	}
	if want := "no GPU backend in " + empty + " (`make cuda` builds the CUDA one)"; info.Note != want {
		t.Errorf("note = %q, want %q", info.Note, want)
	}

	missing := filepath.Join(empty, "absent")
	if _, info, err := selectDevice("auto", missing, false, ""); err != nil || info.Backend != "CPU" {
		t.Errorf("default folder missing: %+v, %v; want the CPU and no error", info, err)
	}
	if _, _, err := selectDevice("auto", missing, true, ""); !errors.Is(err, ErrBackendFolder) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("explicit folder missing: err = %v, want one naming the missing folder", err)
	}

	for _, name := range []string{"cuda", "cuda:1"} {
		_, _, err := selectDevice(name, empty, true, "")
		var de *DeviceError
		if !errors.As(err, &de) || !errors.Is(err, ErrNoDevice) || de.Device != name {
			t.Fatalf("selectDevice(%s) err = %v, want a *DeviceError", name, err)
		}
		want := "llama: device " + name + ": no CUDA backend is loaded: the backend folder " + empty +
			" holds no libggml-cuda library. Build it with `make cuda` (it lands in lib/embed-stack beside the binary), or give the folder that holds it"
		if err.Error() != want {
			t.Errorf("err = %q\nwant  %q", err, want)
		}
	}
	if _, _, err := selectDevice("metal", empty, true, ""); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "darwin/arm64 only") {
		t.Errorf("selectDevice(metal) err = %v, want a *DeviceError naming darwin/arm64", err)
	}
}

// TestCorruptBackendLibrary: a file named like a backend that is not one fails
// with its path and the loader's reason, under every device but cpu, which loads
// nothing.
func TestCorruptBackendLibrary(t *testing.T) {
	if err := backendInit(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libggml-cuda.so")
	if err := os.WriteFile(lib, []byte("this is not a shared library\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, err := selectDevice("auto", dir, true, "")
	var be *BackendError
	if !errors.As(err, &be) || be.Path != lib {
		t.Fatalf("err = %v, want a *BackendError for %s", err, lib)
	}
	// dlopen's own words, as ggml logged them.
	if !strings.Contains(be.Reason, "failed to load "+lib) || !(strings.Contains(be.Reason, "invalid ELF header") || strings.Contains(be.Reason, "file too short")) {
		t.Errorf("reason = %q, want ggml's message quoting dlopen's", be.Reason)
	}
	if !strings.Contains(err.Error(), lib+" is not a loadable ggml backend") || !strings.Contains(err.Error(), "`make cuda`") {
		t.Errorf("message = %q, want the path and `make cuda`", err)
	}
	// The result is kept: the folder is not read again.
	if _, _, again := selectDevice("cuda", dir, true, ""); again == nil || again.Error() != err.Error() {
		t.Errorf("second selection: %v, want the same error %v", again, err)
	}
	if dev, info, err := selectDevice("cpu", dir, true, ""); err != nil || dev != nil || info.Backend != "CPU" || info.Note != "" {
		t.Errorf("selectDevice(cpu) = %v, %+v, %v; want the CPU, no note, no error", dev, info, err)
	}
}

// TestDeviceReportOnCPU: an engine on the CPU reports the CPU with the host's
// memory, now and at Open, and runs every layer there.
func TestDeviceReportOnCPU(t *testing.T) {
	e := openTiny(t, Config{Device: "cpu", Threads: 1})
	d := e.Info().Device
	if d.GPU || d.Backend != "CPU" || d.Name != "CPU" || d.GPULayers != 0 || d.Note != "" || d.Description == "" {
		t.Errorf("device = %+v, want the CPU with its description", d)
	}
	m, ok := hostmem.Read()
	if !ok {
		t.Skip("no /proc/meminfo")
	}
	if d.MemoryTotal != m.Total {
		t.Errorf("memory total = %d, want MemTotal %d", d.MemoryTotal, m.Total)
	}
	free, total := e.DeviceMemory()
	if total != m.Total || free <= 0 || free > total {
		t.Errorf("DeviceMemory = %d free of %d; want 0 < free <= MemTotal %d", free, total, m.Total)
	}
	// MemAvailable moves with the machine's load; a tenth of the memory is a
	// bound no test run on a shared machine comes near.
	if diff := free - m.Available; diff > m.Total/10 || -diff > m.Total/10 {
		t.Errorf("DeviceMemory free = %d, MemAvailable %d: further apart than a tenth of MemTotal", free, m.Available)
	}
	if _, err := e.Embed(context.Background(), [][]int32{{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusesMissingGPU: an engine asked for a GPU that is not there fails
// Open; it never runs on the CPU instead.
func TestOpenRefusesMissingGPU(t *testing.T) {
	_, err := Open(Config{ModelPath: modelFile(t, tinyModel), Device: "cuda:0", BackendDir: t.TempDir()})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "`make cuda`") {
		t.Fatalf("Open(cuda:0) err = %v, want a *DeviceError naming `make cuda`", err)
	}
	if _, err := Open(Config{ModelPath: modelFile(t, tinyModel), Device: "tpu"}); err == nil || !strings.Contains(err.Error(), `device "tpu" is not one of auto, cpu, cuda, cuda:N (N = 0, 1, ...) or metal`) {
		t.Errorf("Open(tpu) err = %v, want the list of device names", err)
	}
}

// TestCPULongByVendor: cpuLong gives the long context embed-stack's flash
// attention wherever its kernels take the shape, on Intel's CPUs too (where they
// compute it in float32 FMAs), whichever host runs the test; a GPU keeps its own
// schedule.
func TestCPULongByVendor(t *testing.T) {
	setupAccel(backends.CPUAccelAuto)
	shape := gguf.Shape{KeyLength: 128, ValueLength: 128}
	flash := accelFlashBF16(shape)
	if want := cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16; flash != want {
		t.Fatalf("accelFlashBF16(heads of 128) = %t on a CPU with AVX-512F and AVX512_BF16 %t", flash, want)
	}
	want := map[bool]attentionKind{true: attnFlashBF16, false: attnPlain}[flash]
	for _, tt := range []struct {
		dev  backends.Device
		want attentionKind
	}{
		{backends.Device{Name: "CPU", CPUVendor: "AuthenticAMD"}, want},
		{backends.Device{Name: "CPU"}, want},
		{backends.Device{Name: "CPU", CPUVendor: cpuvariant.VendorIntel}, want},
	} {
		if got := cpuLong(cpuSchedule, tt.dev, shape).long; got != tt.want {
			t.Errorf("cpuLong on vendor %q: long kernel %v, want %v", tt.dev.CPUVendor, got, tt.want)
		}
	}
	if got := cpuLong(gpuSchedule, backends.Device{Name: "CUDA0", GPU: true, CPUVendor: "AuthenticAMD"}, shape).long; got != gpuSchedule.long {
		t.Errorf("cpuLong on a GPU: long kernel %v, want the GPU schedule's %v", got, gpuSchedule.long)
	}
}

// TestCPUScheduleUnchanged pins the CPU's batching to the measured constants the
// doc comments state: moving any of them changes vectors or speed on the CPU. The
// long context's kernel is embed-stack's flash attention over a BF16 KV cache
// where its kernels compute it (cpuLong), the plain one elsewhere.
func TestCPUScheduleUnchanged(t *testing.T) {
	s := scheduleFor(false)
	if s.batchTokens != 512 || s.shortMax != 128 || s.encoderPackMax != 32 || s.longCallTokens != 256 || s.maxSeqs != 64 ||
		s.short != attnFlashBF16V || s.long != attnPlain || s.threads() != runtime.NumCPU() {
		t.Errorf("CPU schedule = %+v", s)
	}
	e := openTiny(t, Config{Device: "cpu", ContextTokens: 1024})
	long := attnPlain
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		long = attnFlashBF16
	}
	if e.short.kernel != attnFlashBF16V || e.long.kernel != long || e.shortMax != FlashMaxTokens || e.long.batchTokens != LongCallTokens || e.threads != runtime.NumCPU() {
		t.Errorf("CPU engine: short %v, long %v (%d-token calls), shortMax %d, threads %d", e.short.kernel, e.long.kernel, e.long.batchTokens, e.shortMax, e.threads)
	}
}

// TestFlashFor: a GPU context asks llama.cpp for flash attention only where the
// GPU computes it (auto), since a forced one the GPU lacks runs on the CPU, slowly
// and in f16 (flashFor); the CPU's kinds stay as they were.
func TestFlashFor(t *testing.T) {
	for _, tt := range []struct {
		k    attentionKind
		gpu  bool
		want flashMode
	}{
		{attnPlain, false, flashOff},
		{attnPlain, true, flashOff},
		{attnFlash, false, flashOn},
		{attnFlash, true, flashAuto},
		{attnFlashBF16V, false, flashOn},
		{attnFlashBF16, false, flashOn},
	} {
		if got := flashFor(tt.k, tt.gpu); got != tt.want {
			t.Errorf("flashFor(%v, gpu %v) = %v, want %v", tt.k, tt.gpu, got, tt.want)
		}
	}
}

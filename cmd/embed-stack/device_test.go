package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/llama"
	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/internal/hostmem"
)

// TestDeviceFlagsPlumbing: --device, --gpu-layers, --backend-dir and --cpu-accel come from the
// flag, the environment or the config file like every serve setting, are checked,
// and reach every worker's command line (but the MLX server's).
func TestDeviceFlagsPlumbing(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "embed-stack.toml")
	os.WriteFile(file, []byte("backend_dir = \"/opt/es/lib\"\ngpu_layers = 12\ndevice = \"metal\"\n"), 0o600)
	env := map[string]string{"EMBED_STACK_CONFIG": file, "EMBED_STACK_DEVICE": "cuda:1", "EMBED_STACK_CPU_ACCEL": "off"}
	f := &serveFlags{}
	s := newServeFlagSet(f)
	if err := s.Parse([]string{"--gpu-layers", "7", "--model", "m.gguf"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	d := f.run.Device
	if d != (backends.DeviceArgs{Device: "cuda:1", GPULayers: 7, BackendDir: "/opt/es/lib", CPUAccel: "off"}) ||
		s.Source("device") != flagconfig.FromEnv || s.Source("gpu-layers") != flagconfig.FromFlag || s.Source("backend-dir") != flagconfig.FromFile {
		t.Errorf("device flags = %+v from %s/%s/%s", d, s.Source("device"), s.Source("gpu-layers"), s.Source("backend-dir"))
	}
	if err := checkDevice(d); err != nil {
		t.Errorf("check: %v", err)
	}
	want := []string{"--device", "cuda:1", "--gpu-layers", "7", "--backend-dir", "/opt/es/lib", "--cpu-accel", "off"}
	if got := d.Args(); !slices.Equal(got, want) {
		t.Errorf("worker args = %q, want %q", got, want)
	}
	if got := (backends.DeviceArgs{Device: "auto"}).Args(); !slices.Equal(got, []string{"--device", "auto", "--gpu-layers", "0"}) {
		t.Errorf("default worker args = %q", got)
	}
	for _, bad := range []struct {
		f    backends.DeviceArgs
		want string
	}{
		{backends.DeviceArgs{Device: "gpu"}, `--device: device "gpu" is not one of auto, cpu, cuda, cuda:N (N = 0, 1, ...) or metal`},
		{backends.DeviceArgs{Device: "cpu", CPUAccel: "fast"}, `--cpu-accel: "fast" is not auto, off, avx512 or avx2`},
	} {
		if err := checkDevice(bad.f); err == nil || err.Error() != bad.want {
			t.Errorf("check(%+v) = %v, want %q", bad.f, err, bad.want)
		}
	}

	// The MLX server chooses no ggml device: the flags are dropped for it.
	args := backends.WorkerArgs{Model: "q.gguf", Ctx: 8192, DeviceArgs: d}
	mlx := (backends.WarmProgram{Name: backends.WarmMLX, MLXServer: "/bin/mlx", MLXModel: "/m"}).Spec(args, backends.WorkerSpec{Path: "/bin/embed-stack", Args: append([]string{"worker"}, args.Args()...)})
	if !slices.Equal(mlx.Args, []string{"--model", "/m", "--ctx", "8192"}) {
		t.Errorf("mlx args = %q", mlx.Args)
	}
}

// TestDeviceDefaults: backends spells the device flags' defaults without
// importing backends/llama; they must be llama's.
func TestDeviceDefaults(t *testing.T) {
	if backends.DefaultDevice != llama.DeviceAuto || backends.BackendDirName != llama.BackendDirName {
		t.Errorf("backends has %q and %q, llama %q and %q", backends.DefaultDevice, backends.BackendDirName, llama.DeviceAuto, llama.BackendDirName)
	}
}

// TestCUDACMakeConfigures runs the configure step of `make cuda` (cmake/cuda)
// without nvcc: the ggml sources of the pinned module are found and configured,
// and without EMBED_STACK_NO_CUDA the missing compiler is named. The CUDA build
// itself needs nvcc and a GPU machine (scripts/gpu-check.sh).
func TestCUDACMakeConfigures(t *testing.T) {
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("no cmake")
	}
	root := e2e.RepoRoot(t)
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
	if err != nil {
		t.Skipf("ollama module directory: %v", err)
	}
	ollama := strings.TrimSpace(string(out))
	configure := func(extra ...string) (string, error) {
		args := append([]string{"-S", filepath.Join(root, "cmake", "cuda"), "-B", t.TempDir(), "-DOLLAMA_DIR=" + ollama}, extra...)
		out, err := exec.Command("cmake", args...).CombinedOutput()
		return string(out), err
	}
	if out, err := configure("-DEMBED_STACK_NO_CUDA=ON"); err != nil || !strings.Contains(out, "Build files have been written") {
		t.Errorf("configure without CUDA: %v\n%s", err, out)
	}
	if _, err := exec.LookPath("nvcc"); err == nil {
		return
	}
	if out, err := configure(); err == nil || !strings.Contains(out, "no CUDA compiler (nvcc) found") {
		t.Errorf("configure with CUDA and no nvcc: err %v, want the missing compiler named\n%s", err, out)
	}
}

// runBin runs the binary with args and returns its exit code and stderr.
func runBin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = nil
	cmd.WaitDelay = 5 * time.Second
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return e2e.ExitCode(err), stdout.String(), stderr.String()
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("%s %q did not exit within 2 minutes\n%s", bin, args, stderr.String())
	}
	return 0, "", ""
}

// TestWorkerDeviceErrors: the worker refuses, before serving, a CUDA device with no
// CUDA backend, a corrupt backend library and a malformed device name, each with
// a message naming the fix.
func TestWorkerDeviceErrors(t *testing.T) {
	bin, model := e2e.Paths(t)
	empty := t.TempDir()
	corrupt := t.TempDir()
	lib := filepath.Join(corrupt, "libggml-cuda.so")
	if err := os.WriteFile(lib, []byte("not an ELF file"), 0o755); err != nil {
		t.Fatal(err)
	}
	socket := func() string { return filepath.Join(t.TempDir(), "w.sock") }
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"cuda without backend", []string{"--device", "cuda", "--backend-dir", empty}, 1, []string{
			"embed-stack worker: loading the model: --device: llama: device cuda: no CUDA backend is loaded: the backend folder " + empty + " holds no libggml-cuda library. Build it with `make cuda`",
			"(the folder: --backend-dir or EMBED_STACK_BACKEND_DIR; or --device auto to run on the CPU when no GPU is there)"}},
		{"cuda:2 without backend", []string{"--device", "cuda:2", "--backend-dir", empty}, 1, []string{"--device: llama: device cuda:2: no CUDA backend is loaded"}},
		{"corrupt library", []string{"--backend-dir", corrupt}, 1, []string{
			"embed-stack worker: loading the model: --backend-dir: llama: " + lib + " is not a loadable ggml backend: llama.cpp: load_backend: failed to load " + lib + ":",
			"Rebuild it with `make cuda`, move it out of the folder, or run on the CPU without loading any backend (device cpu) (--device cpu loads none)"}},
		{"missing folder", []string{"--backend-dir", filepath.Join(empty, "nope")}, 1, []string{"embed-stack worker: loading the model: --backend-dir: llama: the GPU backend folder cannot be read: stat " + filepath.Join(empty, "nope") + ": no such file or directory"}},
		{"bad name", []string{"--device", "gpu0"}, 2, []string{`embed-stack worker: --device: device "gpu0" is not one of auto, cpu, cuda, cuda:N (N = 0, 1, ...) or metal`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"worker", "--model", model, "--socket", socket(), "--threads", "1", "--ignore-stdin"}, tt.args...)
			code, _, stderr := runBin(t, bin, args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\n%s", code, tt.code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	// --device cpu loads no backend, so the corrupt file is never read.
	code, stdout, stderr := runBin(t, bin, "devices", "--device", "cpu", "--backend-dir", corrupt, "--json")
	var d backends.Device
	if code != 0 || json.Unmarshal([]byte(stdout), &d) != nil || d.Backend != "CPU" || d.GPU {
		t.Errorf("devices --device cpu beside a corrupt library: exit %d, %s %s", code, stdout, stderr)
	}
}

// TestDevicesCommand: `embed-stack devices` reports the CPU with the host's
// memory and why no GPU was used.
func TestDevicesCommand(t *testing.T) {
	bin, _ := e2e.Paths(t)
	empty := t.TempDir()
	code, stdout, stderr := runBin(t, bin, "devices", "--json", "--backend-dir", empty)
	var d backends.Device
	if code != 0 || json.Unmarshal([]byte(stdout), &d) != nil {
		t.Fatalf("devices --json: exit %d, %q %s", code, stdout, stderr)
	}
	if d.Name != "CPU" || d.Backend != "CPU" || d.GPU || d.Note != "no GPU backend in "+empty+" (`make cuda` builds the CUDA one)" {
		t.Errorf("device = %+v", d)
	}
	if m, ok := hostmem.Read(); ok && d.MemoryTotal != m.Total {
		t.Errorf("memory total %d, want MemTotal %d", d.MemoryTotal, m.Total)
	}
	code, _, stderr = runBin(t, bin, "devices", "--device", "cuda", "--backend-dir", empty)
	if code != 1 || !strings.Contains(stderr, "no CUDA backend is loaded") {
		t.Errorf("devices --device cuda: exit %d\n%s", code, stderr)
	}
}

// TestServeRefusesMissingCUDA: serve asked for CUDA by flag, environment or
// config file, with no CUDA backend, stops before starting a worker, naming
// `make cuda`.
func TestServeRefusesMissingCUDA(t *testing.T) {
	bin, model := e2e.Paths(t)
	empty := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("device: cuda:1\n"), 0o600)
	for _, tt := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"flag", []string{"--device", "cuda"}, nil, "--device: llama: device cuda: no CUDA backend is loaded"},
		{"env", nil, []string{"EMBED_STACK_DEVICE=cuda:0"}, "--device: llama: device cuda:0: no CUDA backend is loaded"},
		{"file", []string{"--config", cfg}, nil, "--device: llama: device cuda:1: no CUDA backend is loaded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"serve", "--model", model, "--addr", e2e.FreeAddr(t), "--backend-dir", empty}, tt.args...)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), tt.env...)
			p := e2e.Start(t, cmd)
			select {
			case <-p.Done():
			case <-time.After(2 * time.Minute):
				t.Fatalf("serve still running:\n%s", p.Out)
			}
			if code := e2e.ExitCode(p.Err()); code != 1 || !strings.Contains(p.Out.String(), tt.want) || !strings.Contains(p.Out.String(), "`make cuda`") {
				t.Errorf("exit %d, want 1 and %q:\n%s", code, tt.want, p.Out)
			}
		})
	}
}

// TestServeReportsDevice: on a machine without a GPU backend serve runs on the
// CPU, and /health, the startup log and the device memory gauges say so, with the
// host's memory.
func TestServeReportsDevice(t *testing.T) {
	s := e2e.Serve(t)
	resp, err := http.Get(s.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var h struct {
		Status string           `json:"status"`
		Device *backends.Device `json:"device"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &h) != nil || h.Status != "ok" || h.Device == nil {
		t.Fatalf("/health: %d %s", resp.StatusCode, body)
	}
	d := h.Device
	if d.Name != "CPU" || d.Backend != "CPU" || d.GPU || d.GPULayers != 0 || !strings.HasPrefix(d.Note, "no GPU backend in ") {
		t.Errorf("device = %+v, want the CPU and why", d)
	}
	m, ok := hostmem.Read()
	if !ok {
		t.Skip("no /proc/meminfo")
	}
	if d.MemoryTotal != m.Total || d.MemoryFree <= 0 || d.MemoryFree > m.Total {
		t.Errorf("device memory %d free of %d; want 0 < free <= MemTotal %d", d.MemoryFree, d.MemoryTotal, m.Total)
	}
	log := s.Out.String()
	if !strings.Contains(log, `msg="warm worker ready"`) || !strings.Contains(log, "device=CPU") || !strings.Contains(log, "backend=CPU") || !strings.Contains(log, "device_note=\"no GPU backend in ") {
		t.Errorf("startup log lacks the device:\n%s", log)
	}

	resp, err = http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	value := func(series string) float64 {
		for _, line := range strings.Split(string(metrics), "\n") {
			if rest, ok := strings.CutPrefix(line, series+" "); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err == nil {
					return v
				}
			}
		}
		return -1
	}
	total := value(`embed_stack_device_memory_total_bytes{backend="CPU",device="CPU"}`)
	used := value(`embed_stack_device_memory_used_bytes{backend="CPU",device="CPU"}`)
	now, _ := hostmem.Read()
	if total != float64(m.Total) {
		t.Errorf("device memory total gauge = %v, want MemTotal %d\n%s", total, m.Total, metrics)
	}
	// Used is MemTotal less MemAvailable at the scrape; the host's use moves
	// meanwhile, by far less than a tenth of its memory.
	if want := float64(now.Total - now.Available); used <= 0 || used > total || used < want-float64(m.Total)/10 || used > want+float64(m.Total)/10 {
		t.Errorf("device memory used gauge = %v, want about %v", used, want)
	}
}

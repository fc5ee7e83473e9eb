package llama

/*
#include "es.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/hostmem"
)

// Names of Config.Device. "cuda" is "cuda:0".
const (
	DeviceAuto  = "auto"  // the first GPU ggml has, else the CPU
	DeviceCPU   = "cpu"   // the CPU only; no backend library is loaded
	DeviceCUDA  = "cuda"  // cuda:N, the Nth device of ggml's CUDA backend
	DeviceMetal = "metal" // the Metal GPU (compiled in on darwin/arm64 only)
)

// ggml's registry names of the backends a device name selects.
const (
	regCPU   = "CPU"
	regCUDA  = "CUDA"
	regMetal = "Metal"
)

// BackendDirName is the folder, beside the folder of the executable, that GPU
// backends are loaded from by default: bin/embed-stack loads lib/embed-stack/*,
// /usr/local/bin/embed-stack loads /usr/local/lib/embed-stack/*. `make cuda` puts
// libggml-cuda.so there.
const BackendDirName = "lib/embed-stack"

// DefaultBackendDir returns the folder GPU backends are loaded from when
// Config.BackendDir is empty: ../lib/embed-stack from the executable's folder.
func DefaultBackendDir() string {
	exe, err := os.Executable()
	if err != nil {
		return BackendDirName
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), filepath.FromSlash(BackendDirName))
}

// ParseDevice checks a device name (Config.Device, the worker's --device) and
// returns its kind (DeviceAuto, DeviceCPU, DeviceCUDA or DeviceMetal) and, for
// cuda:N, N. The empty string is DeviceAuto.
func ParseDevice(s string) (kind string, index int, err error) {
	name, num, hasNum := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	switch name {
	case "", DeviceAuto, DeviceCPU, DeviceMetal:
		if hasNum {
			break
		}
		if name == "" {
			name = DeviceAuto
		}
		return name, 0, nil
	case DeviceCUDA:
		if !hasNum {
			return DeviceCUDA, 0, nil
		}
		n, err := strconv.Atoi(num)
		if err == nil && n >= 0 {
			return DeviceCUDA, n, nil
		}
	}
	return "", 0, fmt.Errorf("device %q is not one of auto, cpu, cuda, cuda:N (N = 0, 1, ...) or metal", s)
}

// BackendError is a file of the backend folder that ggml could not load as a
// backend: not a shared library, built for another ggml, or missing a library it
// needs (the CUDA runtime, the driver's libcuda).
type BackendError struct {
	Path   string
	Reason string // what ggml logged, dlopen's message included
}

func (e *BackendError) Error() string {
	return fmt.Sprintf("llama: %s is not a loadable ggml backend: %s. Rebuild it with `make cuda`, move it out of the folder, or run on the CPU without loading any backend (device cpu)", e.Path, e.Reason)
}

// ErrBackendFolder is wrapped by the error of a backend folder that was named
// (Config.BackendDir) but cannot be read.
var ErrBackendFolder = errors.New("the GPU backend folder cannot be read")

// ErrNoDevice is what every *DeviceError matches with errors.Is.
var ErrNoDevice = errors.New("requested device not found")

// DeviceError is a device asked for by name (cuda, cuda:N, metal) that ggml does
// not have. It is never a silent fallback to the CPU.
type DeviceError struct {
	Device string // as asked for
	Reason string // why it is not there, and what to do
}

func (e *DeviceError) Error() string {
	return fmt.Sprintf("llama: device %s: %s", e.Device, e.Reason)
}

// Is makes errors.Is(err, ErrNoDevice) true.
func (e *DeviceError) Is(target error) bool { return target == ErrNoDevice }

// backendDirs records the backend folders loaded in this process. ggml's registry is
// process-wide and a loaded library is never unloaded, so each folder is read
// once and its result (the libraries loaded, or the error) reused by every Open.
var backendDirs struct {
	mu     sync.Mutex
	loaded map[string]backendLoad
}

type backendLoad struct {
	libs []string // base names of the libraries loaded
	err  error
}

// isBackendLibrary says whether a file of the backend folder is a ggml backend
// to load: libggml-NAME.so (.dylib, .dll), except libggml-base, the shared ggml
// core the backends link against (loaded by the dynamic linker), and the CPU
// backends: the CPU backend is compiled into this binary, and a second one would
// register a second CPU device.
func isBackendLibrary(name string) bool {
	stem, ok := strings.CutPrefix(name, "libggml-")
	if !ok {
		return false
	}
	ext := filepath.Ext(stem)
	if ext != ".so" && ext != ".dylib" && ext != ".dll" {
		return false
	}
	stem = strings.TrimSuffix(stem, ext)
	return stem != "" && stem != "base" && !strings.HasPrefix(stem, "cpu")
}

// loadBackends loads every backend library of dir into ggml's registry, once per
// folder and process. A folder that does not exist holds no backend, unless
// explicit (named by the caller rather than the default), when that is an error.
// A file that does not load is an error: the folder is where the operator put the
// GPU backend, and running on the CPU instead would be a silent fallback.
func loadBackends(dir string, explicit bool) ([]string, error) {
	backendDirs.mu.Lock()
	defer backendDirs.mu.Unlock()
	if r, ok := backendDirs.loaded[dir]; ok {
		return r.libs, r.err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		// Nothing loaded, nothing to remember: whether that is an error depends on
		// explicit, which may differ from one call to the next.
		if explicit {
			return nil, fmt.Errorf("llama: %w: %w", ErrBackendFolder, err)
		}
		return nil, nil
	}
	libs, err := readBackendDir(dir)
	if backendDirs.loaded == nil {
		backendDirs.loaded = map[string]backendLoad{}
	}
	backendDirs.loaded[dir] = backendLoad{libs, err}
	return libs, err
}

func readBackendDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("llama: %w: %w", ErrBackendFolder, err)
	}
	var libs []string
	for _, ent := range entries {
		if ent.IsDir() || !isBackendLibrary(ent.Name()) {
			continue
		}
		path := filepath.Join(dir, ent.Name())
		// A file that is no ELF at all is left to dlopen, whose message ggml logs.
		if err := checkLibrary(path); err != nil && !errors.Is(err, errNotELF) {
			return libs, &BackendError{Path: path, Reason: err.Error()}
		}
		cpath := C.CString(path)
		takeLastError()
		reg := C.ggml_backend_load(cpath)
		C.free(unsafe.Pointer(cpath))
		if reg == nil {
			return libs, &BackendError{Path: path, Reason: llamaReason("ggml refused it without saying why (run with log level debug)")}
		}
		libs = append(libs, ent.Name())
		slog.Debug("llama: loaded ggml backend", "path", path, "backend", C.GoString(C.ggml_backend_reg_name(reg)),
			"devices", int(C.ggml_backend_reg_dev_count(reg)))
	}
	if len(libs) > 0 {
		routeBaseLog()
	}
	return libs, nil
}

// ggmlDevice is one device of ggml's registry.
type ggmlDevice struct {
	dev     C.ggml_backend_dev_t
	backend string // registry name: CPU, CUDA, Metal, BLAS, ...
	kind    C.enum_ggml_backend_dev_type
}

func ggmlDevices() []ggmlDevice {
	n := int(C.ggml_backend_dev_count())
	out := make([]ggmlDevice, 0, n)
	for i := range n {
		d := C.ggml_backend_dev_get(C.size_t(i))
		out = append(out, ggmlDevice{
			dev:     d,
			backend: C.GoString(C.ggml_backend_reg_name(C.ggml_backend_dev_backend_reg(d))),
			kind:    C.ggml_backend_dev_type(d),
		})
	}
	return out
}

// selectDevice loads the CPU kernel variant cpuVariant asks for (Config.CPUVariant)
// and the backends the device name needs, and returns the ggml device to offload
// to (nil for the CPU) with its description.
func selectDevice(name, dir string, explicitDir bool, cpuVariant string) (C.ggml_backend_dev_t, backends.Device, error) {
	kind, index, err := ParseDevice(name)
	if err != nil {
		return nil, backends.Device{}, fmt.Errorf("llama: Config.Device: %w", err)
	}
	if dir == "" {
		dir = DefaultBackendDir()
	}
	cpu, err := selectCPUVariant(cpuVariant, dir)
	if err != nil {
		return nil, backends.Device{}, fmt.Errorf("llama: Config.CPUVariant: %w", err)
	}
	dev, info, err := selectGPU(kind, index, name, dir, explicitDir)
	info.CPUVariant, info.CPUVariantNote, info.Warning = cpu.Name(), cpu.Note, cpu.Warning
	info.CPUFeatures, info.CPUVendor = cpu.Features, cpu.Vendor
	return dev, info, err
}

// selectGPU loads the GPU backends of dir the device kind needs (none for cpu)
// and returns the device to offload to, nil for the CPU.
func selectGPU(kind string, index int, name, dir string, explicitDir bool) (C.ggml_backend_dev_t, backends.Device, error) {
	var err error
	var libs []string
	if kind != DeviceCPU {
		// Metal is compiled in; a backend folder may still hold others.
		if libs, err = loadBackends(dir, explicitDir); err != nil {
			return nil, backends.Device{}, err
		}
	}
	devs := ggmlDevices()
	pick := func(backend string) []ggmlDevice {
		var out []ggmlDevice
		for _, d := range devs {
			if d.backend == backend && d.kind != C.GGML_BACKEND_DEVICE_TYPE_CPU {
				out = append(out, d)
			}
		}
		return out
	}
	switch kind {
	case DeviceCUDA:
		cuda := pick(regCUDA)
		switch {
		case len(cuda) == 0 && !slices.ContainsFunc(libs, func(l string) bool { return strings.HasPrefix(l, "libggml-cuda") }):
			return nil, backends.Device{}, &DeviceError{Device: name, Reason: fmt.Sprintf("no CUDA backend is loaded: the backend folder %s holds no libggml-cuda library. Build it with `make cuda` (it lands in %s beside the binary), or give the folder that holds it", dir, BackendDirName)}
		case len(cuda) == 0:
			return nil, backends.Device{}, &DeviceError{Device: name, Reason: "the CUDA backend is loaded but found no GPU; check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"}
		case index >= len(cuda):
			return nil, backends.Device{}, &DeviceError{Device: name, Reason: fmt.Sprintf("the CUDA backend has %d device(s), cuda:0 to cuda:%d", len(cuda), len(cuda)-1)}
		}
		return gpuDevice(cuda[index])
	case DeviceMetal:
		metal := pick(regMetal)
		if len(metal) == 0 {
			reason := "Metal is compiled in on darwin/arm64 only; this binary is for " + runtime.GOOS + "/" + runtime.GOARCH
			if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
				reason = "ggml's Metal backend found no GPU"
			}
			return nil, backends.Device{}, &DeviceError{Device: name, Reason: reason}
		}
		return gpuDevice(metal[0])
	case DeviceAuto:
		// A discrete GPU first, then an integrated one, as llama.cpp itself orders
		// them; RPC servers are never picked by default.
		for _, want := range []C.enum_ggml_backend_dev_type{C.GGML_BACKEND_DEVICE_TYPE_GPU, C.GGML_BACKEND_DEVICE_TYPE_IGPU} {
			for _, d := range devs {
				if d.kind == want && d.backend != "RPC" {
					return gpuDevice(d)
				}
			}
		}
		info := cpuDevice(devs)
		info.Note = fmt.Sprintf("no GPU backend in %s (`make cuda` builds the CUDA one)", dir)
		if len(libs) > 0 {
			info.Note = fmt.Sprintf("the backends loaded from %s (%s) found no GPU", dir, strings.Join(libs, ", "))
		}
		return nil, info, nil
	}
	return nil, cpuDevice(devs), nil
}

func gpuDevice(d ggmlDevice) (C.ggml_backend_dev_t, backends.Device, error) {
	info := backends.Device{
		Name:        C.GoString(C.ggml_backend_dev_name(d.dev)),
		Description: C.GoString(C.ggml_backend_dev_description(d.dev)),
		Backend:     d.backend,
		GPU:         true,
	}
	info.MemoryFree, info.MemoryTotal = devMemory(d.dev)
	return d.dev, info, nil
}

func cpuDevice(devs []ggmlDevice) backends.Device {
	info := backends.Device{Name: regCPU, Backend: regCPU}
	for _, d := range devs {
		if d.kind == C.GGML_BACKEND_DEVICE_TYPE_CPU {
			info.Name = C.GoString(C.ggml_backend_dev_name(d.dev))
			info.Description = C.GoString(C.ggml_backend_dev_description(d.dev))
			break
		}
	}
	info.MemoryFree, info.MemoryTotal = hostMemory(devs)
	return info
}

// devMemory is ggml's free and total memory of a device.
func devMemory(d C.ggml_backend_dev_t) (free, total int64) {
	var f, t C.size_t
	C.ggml_backend_dev_memory(d, &f, &t)
	return int64(f), int64(t)
}

// hostMemory is the host's available and total memory: /proc/meminfo where there
// is one, since ggml's CPU device reports all memory as free; else ggml's figures.
func hostMemory(devs []ggmlDevice) (free, total int64) {
	if m, ok := hostmem.Read(); ok {
		return m.Available, m.Total
	}
	for _, d := range devs {
		if d.kind == C.GGML_BACKEND_DEVICE_TYPE_CPU {
			return devMemory(d.dev)
		}
	}
	return 0, 0
}

// Probe returns the device an engine opened with c would run on, loading the
// backends c.Device needs from c.BackendDir but no model. Its errors are Open's.
func Probe(c Config) (backends.Device, error) {
	if err := backendInit(); err != nil {
		return backends.Device{}, err
	}
	dev, info, err := selectDevice(c.Device, c.BackendDir, c.BackendDir != "", c.CPUVariant)
	if err == nil && dev == nil {
		info.CPUAccel, info.CPUAccelBF16 = setupAccel(c.CPUAccel)
	}
	return info, err
}

// DeviceMemory returns the free and total memory, in bytes, of the device the
// engine runs on, read now: on a GPU what its backend reports (the driver's
// figures, every process's allocations counted), on the CPU the host's
// MemAvailable and MemTotal. Safe for concurrent use: it reads device counters and
// never touches the engine's contexts.
func (e *Engine) DeviceMemory() (free, total int64) {
	if e.dev != nil {
		return devMemory(e.dev)
	}
	return hostMemory(ggmlDevices())
}

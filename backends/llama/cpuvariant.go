package llama

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include "ggml-backend.h"
#include "ggml-cpu.h"

extern void embedStackLlamaLog(int level, char *text, void *user_data);

// es_features_fn is the reg's ggml_backend_get_features, or NULL.
static ggml_backend_get_features_t es_features_fn(ggml_backend_reg_t reg) {
	return (ggml_backend_get_features_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
}
static struct ggml_backend_feature * es_features(ggml_backend_get_features_t fn, ggml_backend_reg_t reg) { return fn(reg); }
static struct ggml_backend_feature * es_feature_at(struct ggml_backend_feature * f, int i) { return &f[i]; }

// es_route_base_log points the log of the ggml core that loaded backends link
// against (libggml-base.so in the backend folder: a second copy of ggml's core, with
// its own logger) at the same callback as the binary's. It returns 0 when that
// library is not loaded (no backend from the folder) or lacks ggml_log_set.
static int es_route_base_log(const char *soname) {
	void *h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
	if (h == NULL) {
		return 0;
	}
	void (*set)(ggml_log_callback, void *) = (void (*)(ggml_log_callback, void *)) dlsym(h, "ggml_log_set");
	if (set != NULL) {
		set((ggml_log_callback) embedStackLlamaLog, NULL);
	}
	dlclose(h);
	return set != NULL;
}
*/
import "C"

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/buildinfo"
)

// cpuKernels records the CPU kernels this process runs: chosen and loaded once,
// before the first model, because ggml's registry is per process and a model's
// weights live in buffers of the CPU backend that was registered when it loaded.
var cpuKernels struct {
	mu     sync.Mutex
	done   bool
	asked  string // the Config.CPUVariant of the first call
	choice cpuvariant.Choice
	err    error
}

// selectCPUVariant chooses the CPU kernels for this process (backends/cpuvariant)
// and loads the variant library from dir when one is chosen. A variant that loads
// replaces the compiled-in CPU backend in ggml's registry (ggml_backend_unload),
// so that llama.cpp, which takes the first CPU device it finds
// (ggml_backend_dev_by_type), computes with the variant everywhere: weights,
// KV cache, threads (ggml_backend_set_n_threads is looked up on the device's
// backend) and the abort callback. A library that does not load leaves the
// compiled-in backend registered, with a warning.
//
// The choice is made once per process, by the first call: later ones asking for
// auto get what the first chose; asking for another one by name is an error.
func selectCPUVariant(asked, dir string) (cpuvariant.Choice, error) {
	cpuKernels.mu.Lock()
	defer cpuKernels.mu.Unlock()
	if cpuKernels.done {
		if later := normChoice(asked); later != cpuvariant.Auto && later != normChoice(cpuKernels.asked) {
			return cpuvariant.Choice{}, fmt.Errorf("CPU variant %q: this process already runs the CPU kernels chosen for %q (%s); the choice is made once per process", asked, normChoice(cpuKernels.asked), cpuKernels.choice.Name())
		}
		return cpuKernels.choice, cpuKernels.err
	}
	cpuKernels.done, cpuKernels.asked = true, asked
	cpuKernels.choice, cpuKernels.err = chooseAndLoad(asked, dir)
	return cpuKernels.choice, cpuKernels.err
}

func normChoice(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return cpuvariant.Auto
	}
	return s
}

func chooseAndLoad(asked, dir string) (cpuvariant.Choice, error) {
	builtin := builtinFeatures()
	c, err := cpuvariant.Choose(cpuvariant.Request{
		Host:     cpuvariant.ReadHost(),
		Choice:   asked,
		Present:  presentVariants(dir),
		Builtin:  builtin,
		Expected: buildinfo.CPUBaseline != "" && buildinfo.CPUBaseline != "native",
		Dir:      dir,
	})
	if err != nil || c.Variant == nil {
		return c, err
	}
	path := filepath.Join(dir, c.Variant.Library())
	if err := checkLibrary(path); err != nil {
		return cpuvariant.DamagedWarning(c.Variant, path, err.Error(), builtin), nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	takeLastError()
	reg := C.ggml_backend_load(cpath)
	if reg == nil {
		return cpuvariant.DamagedWarning(c.Variant, path, llamaReason("ggml refused it: its ggml_backend_score says this CPU lacks an instruction set it was built for"), builtin), nil
	}
	if C.ggml_backend_reg_dev_count(reg) != 1 || C.ggml_backend_dev_type(C.ggml_backend_reg_dev_get(reg, 0)) != C.GGML_BACKEND_DEVICE_TYPE_CPU {
		C.ggml_backend_unload(reg)
		return cpuvariant.DamagedWarning(c.Variant, path, "it is not a ggml CPU backend", builtin), nil
	}
	C.ggml_backend_unload(C.ggml_backend_cpu_reg())
	if d := C.ggml_backend_dev_by_type(C.GGML_BACKEND_DEVICE_TYPE_CPU); d == nil || C.ggml_backend_dev_backend_reg(d) != reg {
		return c, fmt.Errorf("llama: CPU variant %s loaded from %s, but ggml's first CPU device is not its own", c.Variant.Name, path)
	}
	routeBaseLog()
	slog.Debug("llama: loaded CPU variant", "path", path, "features", strings.Join(regFeatures(reg), " "))
	return c, nil
}

// routeBaseLog sends the log of the backend folder's libggml-base (loaded by the
// libraries of that folder) to this package's callback, as the binary's own ggml
// log goes: without it that copy of ggml prints every line, debug ones included,
// to stderr.
func routeBaseLog() {
	cname := C.CString("libggml-base.so.0")
	defer C.free(unsafe.Pointer(cname))
	C.es_route_base_log(cname)
}

// presentVariants are the names of the CPU variant libraries in dir.
func presentVariants(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), cpuvariant.LibraryPrefix)
		if ok && !e.IsDir() && strings.HasSuffix(name, ".so") {
			out = append(out, strings.TrimSuffix(name, ".so"))
		}
	}
	return out
}

// builtinFeatures are the features of the CPU backend compiled into the binary, as
// ggml reports them ("AVX2", "FMA", ...: what its kernels were compiled for).
func builtinFeatures() []string {
	return regFeatures(C.ggml_backend_cpu_reg())
}

func regFeatures(reg C.ggml_backend_reg_t) []string {
	fn := C.es_features_fn(reg)
	if fn == nil {
		return nil
	}
	out := []string{}
	f := C.es_features(fn, reg)
	for i := C.int(0); ; i++ {
		feat := C.es_feature_at(f, i)
		if feat.name == nil {
			break
		}
		if v := C.GoString(feat.value); v != "" && v != "0" {
			out = append(out, C.GoString(feat.name))
		}
	}
	return out
}

// extraBuffers says whether llama.cpp may put the model's weights in the CPU
// backend's extra buffer types (llama_model_params.use_extra_bufts). The variants
// are built as the binary's ggml is, without weight repacking, so the one extra
// buffer type there can be is ggml's AMX one (the sapphirerapids variant). It takes
// every matrix whose rows are a multiple of 2048 values long, quantized or F16
// alike, but it has AMX kernels for quantized types only: F16 matrices (those of
// Qwen3-Embedding-8B, not of 0.6B or 4B) would go to its plain AVX-512 loop, one
// horizontal sum per output, instead of llamafile's sgemm (ggml-cpu/amx/mmq.cpp:
// "f16 only has avx512 kernels for now"). So float weights (F32, F16, BF16) stay in
// ordinary buffers; quantized ones get AMX. Unmeasured: no AMX host has run it.
func extraBuffers(modelPath string) bool {
	cpuKernels.mu.Lock()
	v := cpuKernels.choice.Variant
	cpuKernels.mu.Unlock()
	if v == nil || !v.Uses("amx_int8") {
		return true
	}
	return !floatWeights(modelPath)
}

// floatWeights says whether the model's layer matrices are stored as floats (F32,
// F16, BF16), judged by the first two-dimensional blk.* weight of the GGUF.
func floatWeights(path string) bool {
	f, err := gguf.Open(path)
	if err != nil {
		return false // Open reports the error itself
	}
	defer f.Close()
	for _, t := range f.Tensors() {
		if strings.HasPrefix(t.Name, "blk.") && strings.HasSuffix(t.Name, ".weight") && len(t.Dims) == 2 {
			return t.Type == gguf.TypeF32 || t.Type == gguf.TypeF16 || t.Type == gguf.TypeBF16
		}
	}
	return false
}

package llama

/*
#include "es.h"
#include "accel.h"
#include "kvpages.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/embed-stack/embed-stack/gguf"
)

var backendInit = sync.OnceValue(func() error {
	C.es_keep_freed_mapped()
	// llama.cpp clears each new KV cache: without faulting it in (kvpages.c).
	C.es_clear_by_pages()
	C.llama_backend_init()
	// The CPU backend is compiled in (ggml is built with GGML_USE_CPU) and registers
	// itself statically, as Metal does on darwin/arm64; loadable GPU backends come
	// from Config.BackendDir (loadBackends), not from ollama's ggml.OnceLoad, which
	// this package never calls.
	if C.ggml_backend_dev_count() == 0 {
		return errors.New("llama: no ggml compute device is registered; the binary was built without ggml's CPU backend")
	}
	return nil
})

// loadModel loads the weights of the model at path (whose header says s), on dev
// with gpuLayers of its layers when dev is a GPU, else on the CPU. The weights are
// memory-mapped, so workers started one after another share the page cache instead
// of each reading them.
//
// repacked counts the matrices embed-stack's own kernels took as the model loaded
// (BF16 weights on an AVX512_BF16 CPU, accel.c; with q8, Q8_0 ones there too): the
// products with BF16 ones run on that device whatever --cpu-accel says later. q8 is
// false for a reranker, whose scores stay those of ggml's Q8_0 products.
func loadModel(path string, s gguf.Shape, dev C.ggml_backend_dev_t, gpuLayers int, q8 bool) (model *C.struct_llama_model, repacked int, err error) {
	mp := C.llama_model_default_params()
	// One device or none: split mode NONE keeps the model on devices[main_gpu],
	// and main_gpu -1 on no GPU at all, whatever backends are registered.
	mp.split_mode = C.LLAMA_SPLIT_MODE_NONE
	mp.main_gpu = -1
	mp.n_gpu_layers = 0
	if dev != nil {
		devs := (*[2]C.ggml_backend_dev_t)(C.calloc(2, C.size_t(unsafe.Sizeof(dev))))
		defer C.free(unsafe.Pointer(devs))
		devs[0] = dev
		mp.devices = &devs[0]
		mp.main_gpu = 0
		mp.n_gpu_layers = C.int32_t(gpuLayers)
	}
	mp.use_mmap = true
	mp.use_mlock = false
	mp.use_extra_bufts = C.bool(extraBuffers(path))
	// Load the model without its tokenizer: the engine takes token ids, and building
	// llama.cpp's BPE tables (151k tokens, 151k merges) was two thirds of a worker's
	// start, which every ephemeral worker pays. The vocabulary size, which the
	// embedding table's shape and the id check need, comes from that table
	// (readShape).
	overrides := (*C.struct_llama_model_kv_override)(C.calloc(3, C.sizeof_struct_llama_model_kv_override))
	defer C.free(unsafe.Pointer(overrides))
	carch := C.CString(s.Architecture)
	defer C.free(unsafe.Pointer(carch))
	C.es_no_vocab(overrides, carch, C.int64_t(s.VocabSize))
	mp.kv_overrides = overrides
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	takeLastError()
	var n C.long
	model = C.es_model_load(cpath, mp, C.bool(q8), &n)
	switch {
	case model == nil && n == C.ES_PANELS_UNREADABLE:
		return nil, 0, fmt.Errorf("llama: model %s holds BF16 matrices in embed-stack's panel layout (a copy --weights converted for embed-stack's AVX512_BF16 kernels), which no kernel of this worker reads: its CPU kernels are off (--cpu-accel off) or its CPU lacks AVX512_BF16; load the original file", path)
	case model == nil && n == C.ES_PANELS_NOT_TAKEN:
		return nil, 0, fmt.Errorf("llama: model %s holds BF16 matrices in embed-stack's panel layout, and embed-stack's CPU kernels did not take all of them (a GPU, or a matrix they do not multiply); load the original file", path)
	case model == nil:
		return nil, 0, fmt.Errorf("llama: loading model %s failed: %s", path, llamaReason("is it a GGUF file of a supported architecture?"))
	}
	return model, int(n), nil
}

// readShape reads the model's shape from the GGUF header (gguf.Shape): the
// architecture, and the rows of its token-embedding table, which the model is
// loaded with as its vocabulary size (see loadModel).
func readShape(path string) (gguf.Shape, error) {
	s, err := gguf.ReadShape(path)
	if err != nil {
		return s, fmt.Errorf("llama: loading model %s failed: %w", path, err)
	}
	if s.VocabSize == 0 {
		return s, fmt.Errorf("llama: model %s has no two-dimensional %s; is it a GGUF file of a supported architecture?", path, gguf.TensorTokenEmbedding)
	}
	return s, nil
}

// modelName is the model's general.name, else the file's name.
func modelName(s gguf.Shape, path string) string {
	if s.Name != "" {
		return s.Name
	}
	return filepath.Base(path)
}

package llama

/*
#include "lifetime.h"
*/
import "C"

import "fmt"

// hookBackendFree makes the backends the device dev creates outlive the scheduler
// of each context freed by freeContext (lifetime.c says why: CUDA's backends died
// in llama_free otherwise). Open calls it for the GPU it offloads to.
func hookBackendFree(dev C.ggml_backend_dev_t) error {
	if !C.es_hook_device(dev) {
		return fmt.Errorf("llama: cannot hook the backends of another ggml device (16 are hooked)")
	}
	return nil
}

// freeContext frees a llama.cpp context, its hooked devices' backends last.
func freeContext(lctx *C.struct_llama_context) {
	C.es_context_free(lctx)
}

// ggmlCPUDevice is ggml's CPU device, for the test of hookBackendFree, which has no GPU.
func ggmlCPUDevice() C.ggml_backend_dev_t {
	return C.ggml_backend_dev_by_type(C.GGML_BACKEND_DEVICE_TYPE_CPU)
}

// probeResets turns on or off the probe of lifetime.c (es_probe_resets) and
// returns the resets it counted, and of those the ones on a backend already freed.
func probeResets(on bool) (calls, late int) {
	var l C.int
	c := C.es_probe_resets(C.bool(on), &l)
	return int(c), int(l)
}

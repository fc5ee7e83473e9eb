package llama

/*
#include "llama.h"
#include "kvpages.h"
*/
import "C"

import "log/slog"

// releaseKV hands the pages of the long context's KV cache back to the OS
// (Config.IdleRelease, kvpages.c). On the owner goroutine, between jobs: the
// cache's contents are not needed there, and zeros are valid stale cells.
func (e *Engine) releaseKV() {
	if e.long == nil || e.long.kv == nil {
		return
	}
	if released := int64(C.es_kv_release(e.long.kv)); released > 0 {
		e.kvReleases.Add(1)
		slog.Debug("llama: idle; returned the KV cache's pages to the OS", "bytes", released)
	}
}

// kvResident is how many bytes of k's KV cache are resident, and its size, as
// far as the context's graphs have shown it (0, 0 before the first).
func (k *kctx) kvResident() (resident, total int64) {
	if k == nil || k.kv == nil {
		return 0, 0
	}
	var t C.size_t
	r := C.es_kv_resident(k.kv, &t)
	return int64(r), int64(t)
}

// clearKVData clears k's KV cache with its data, as a round with a non-finite
// value does (decode.go); for tests, on the owner goroutine.
func (k *kctx) clearKVData() {
	C.llama_memory_clear(C.llama_get_memory(k.lctx), true)
}

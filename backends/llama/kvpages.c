// kvpages.c: a context's KV cache, cleared without touching it and handed back to
// the OS while the engine idles.
//
// llama.cpp clears a context's KV buffer when it creates it (memset, to keep NaNs
// out of padding). For the 0.6B model's 8192-token cache that faulted in 896 MiB
// at once: 1.5 of the warm worker's 2.1 s of cold start on a VM (each page's first
// touch there costs about a microsecond and a half), and all of it stayed resident,
// busy or idle. On Linux ggml's CPU buffers now clear to zero the way the kernel
// does: MADV_DONTNEED on the buffer's whole pages (which then read as zeros, and
// cost nothing to drop where they were never touched), memset only on the partial
// pages at its ends. Between rounds the engine needs none of a cache's contents
// (each round starts from an empty cache, and a stale cell only has to be finite,
// decode.go), so an idle engine hands the long context's cache back by clearing it
// again (es_kv_release). llama.cpp gives no handle on that buffer; the clears it
// makes while es_init_context creates the context are the cache's (nothing else
// of a context is cleared), so they are recorded there (es_kv_capture).
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "ggml-backend-impl.h"
#include "kvpages.h"

#define ES_KV_BUFFERS 8

struct es_kv_pages {
	// written while the context is created, read on the owner goroutine after
	ggml_backend_buffer_t bufs[ES_KV_BUFFERS];
	int n;
};

struct es_kv_pages *es_kv_pages_new(void) { return calloc(1, sizeof(struct es_kv_pages)); }

void es_kv_pages_free(struct es_kv_pages *p) { free(p); }

// es_kv_capturing receives the buffers cleared by pages on this thread.
static _Thread_local struct es_kv_pages *es_kv_capturing;

void es_kv_capture(struct es_kv_pages *p) { es_kv_capturing = p; }

// ggml's CPU buffer type's own alloc_buffer, and its buffers' clear.
static ggml_backend_buffer_t (*es_cpu_alloc)(ggml_backend_buffer_type_t buft, size_t size);
static void (*_Atomic es_cpu_clear)(ggml_backend_buffer_t buffer, uint8_t value);

#if defined(__linux__)
// es_pages gives buffer b's whole pages: [*lo, *hi), inside its memory.
static bool es_pages(ggml_backend_buffer_t b, uintptr_t *lo, uintptr_t *hi) {
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t base = (uintptr_t)b->context;
	*lo = (base + page - 1) & ~(page - 1);
	*hi = (base + b->size) & ~(page - 1);
	return b->context != NULL && *hi > *lo;
}
#endif

// es_cpu_clear_pages is a CPU buffer's clear: to zero by MADV_DONTNEED on its
// whole pages and memset on the rest, any other value as ggml does. The buffer's
// memory is ggml_aligned_malloc's, private and anonymous, and the pages advised
// lie inside it.
static void es_cpu_clear_pages(ggml_backend_buffer_t b, uint8_t value) {
#if defined(__linux__)
	uintptr_t lo, hi;
	if (value == 0 && es_pages(b, &lo, &hi) && madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0) {
		uintptr_t base = (uintptr_t)b->context;
		memset((void *)base, 0, lo - base);
		memset((void *)hi, 0, base + b->size - hi);
		struct es_kv_pages *p = es_kv_capturing;
		if (p != NULL && p->n < ES_KV_BUFFERS) {
			p->bufs[p->n++] = b;
		}
		return;
	}
#endif
	es_cpu_clear(b, value);
}

static ggml_backend_buffer_t es_cpu_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
	ggml_backend_buffer_t b = es_cpu_alloc(buft, size);
	if (b != NULL && b->iface.clear != NULL && b->iface.clear != es_cpu_clear_pages) {
		es_cpu_clear = b->iface.clear;
		b->iface.clear = es_cpu_clear_pages;
	}
	return b;
}

static void es_hook_cpu_buffers(void) {
	ggml_backend_buffer_type_t t = ggml_backend_cpu_buffer_type();
	es_cpu_alloc = t->iface.alloc_buffer;
	t->iface.alloc_buffer = es_cpu_alloc_buffer;
}

void es_clear_by_pages(void) {
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, es_hook_cpu_buffers);
}

size_t es_kv_release(struct es_kv_pages *p) {
	size_t cleared = 0;
	for (int i = 0; p != NULL && i < p->n; i++) {
		ggml_backend_buffer_clear(p->bufs[i], 0);
		cleared += p->bufs[i]->size;
	}
	return cleared;
}

size_t es_kv_resident(struct es_kv_pages *p, size_t *total) {
	size_t resident = 0;
	*total = 0;
#if defined(__linux__)
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (int i = 0; p != NULL && i < p->n; i++) {
		uintptr_t lo, hi;
		if (!es_pages(p->bufs[i], &lo, &hi)) {
			continue;
		}
		size_t pages = (hi - lo) / page;
		unsigned char *vec = malloc(pages);
		if (vec != NULL && mincore((void *)lo, hi - lo, vec) == 0) {
			for (size_t j = 0; j < pages; j++) {
				resident += (vec[j] & 1) * page;
			}
			*total += hi - lo;
		}
		free(vec);
	}
#else
	(void)p;
#endif
	return resident;
}

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
// pages at its ends. Then, between rounds the engine needs none of a cache's
// contents (each round starts from an empty cache, and a stale cell only has to be
// finite, decode.go), so an idle engine hands the long context's cache back the
// same way (es_kv_release). llama.cpp gives no handle on that buffer, so it is
// found in the graphs the context computes: the node reading "cache_k_l0" reads a
// view of the KV tensor, whose buffer is the cache's (one per buffer type).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "ggml-backend-impl.h"
#include "kvpages.h"

#define ES_KV_BUFFERS 8

struct es_kv_pages {
	// written on the thread that computes the context's graphs (the owner
	// goroutine's), read on the same thread between its calls
	ggml_backend_buffer_t bufs[ES_KV_BUFFERS];
	int n;
};

struct es_kv_pages *es_kv_pages_new(void) { return calloc(1, sizeof(struct es_kv_pages)); }

void es_kv_pages_free(struct es_kv_pages *p) { free(p); }

static bool es_kv_tensor(const struct ggml_tensor *t) {
	return strncmp(t->name, "cache_k_l", 9) == 0 || strncmp(t->name, "cache_v_l", 9) == 0;
}

bool es_kv_probe(struct ggml_tensor *t, bool ask, void *user_data) {
	struct es_kv_pages *p = user_data;
	if (!ask || p == NULL) {
		return true;
	}
	for (int i = 0; i < GGML_MAX_SRC; i++) {
		const struct ggml_tensor *s = t->src[i];
		if (s == NULL) {
			continue;
		}
		if (s->view_src != NULL) {
			s = s->view_src;
		}
		ggml_backend_buffer_t b = s->buffer;
		// weights and the scheduler's compute buffers are not the cache's: only the
		// name is compared past this test
		if (b == NULL || ggml_backend_buffer_get_usage(b) != GGML_BACKEND_BUFFER_USAGE_ANY) {
			continue;
		}
		bool known = false;
		for (int j = 0; j < p->n; j++) {
			known = known || p->bufs[j] == b;
		}
		if (!known && p->n < ES_KV_BUFFERS && es_kv_tensor(s)) {
			p->bufs[p->n++] = b;
		}
	}
	return false;
}

#if defined(__linux__)
// es_kv_span gives buffer b's whole pages, when it is ggml's CPU buffer: memory
// ggml_aligned_malloc took for it alone (a GPU's is not the host's, and an
// extra buffer type's memory may be a mapped file).
static bool es_kv_span(ggml_backend_buffer_t b, uintptr_t *lo, uintptr_t *hi) {
	if (!ggml_backend_buffer_is_host(b) || strcmp(ggml_backend_buffer_name(b), "CPU") != 0) {
		return false;
	}
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t base = (uintptr_t)ggml_backend_buffer_get_base(b);
	*lo = (base + page - 1) & ~(page - 1);
	*hi = (base + ggml_backend_buffer_get_size(b)) & ~(page - 1);
	return *hi > *lo;
}

// es_kv_each sums fn over the whole pages of p's CPU buffers, and their size in
// *total.
static size_t es_kv_each(struct es_kv_pages *p, size_t (*fn)(uintptr_t lo, uintptr_t hi), size_t *total) {
	size_t sum = 0;
	*total = 0;
	for (int i = 0; p != NULL && i < p->n; i++) {
		uintptr_t lo, hi;
		if (es_kv_span(p->bufs[i], &lo, &hi)) {
			*total += hi - lo;
			sum += fn(lo, hi);
		}
	}
	return sum;
}

static size_t es_kv_advise(uintptr_t lo, uintptr_t hi) {
	return madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0 ? hi - lo : 0;
}

static size_t es_kv_mincore(uintptr_t lo, uintptr_t hi) {
	size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (hi - lo) / page, resident = 0;
	unsigned char *vec = malloc(pages);
	if (vec != NULL && mincore((void *)lo, hi - lo, vec) == 0) {
		for (size_t j = 0; j < pages; j++) {
			resident += (vec[j] & 1) * page;
		}
	}
	free(vec);
	return resident;
}

size_t es_kv_release(struct es_kv_pages *p) {
	size_t total;
	return es_kv_each(p, es_kv_advise, &total);
}

size_t es_kv_resident(struct es_kv_pages *p, size_t *total) { return es_kv_each(p, es_kv_mincore, total); }
#else
// Elsewhere madvise's MADV_DONTNEED may keep the pages, or their contents.
size_t es_kv_release(struct es_kv_pages *p) {
	(void)p;
	return 0;
}

size_t es_kv_resident(struct es_kv_pages *p, size_t *total) {
	(void)p;
	*total = 0;
	return 0;
}
#endif

// ggml's CPU buffer type's own alloc_buffer, and its buffers' clear.
static ggml_backend_buffer_t (*es_cpu_alloc)(ggml_backend_buffer_type_t buft, size_t size);
static void (*_Atomic es_cpu_clear)(ggml_backend_buffer_t buffer, uint8_t value);

// es_cpu_clear_pages is a CPU buffer's clear: to zero by MADV_DONTNEED on its
// whole pages and memset on the rest, any other value as ggml does. The buffer's
// memory is ggml_aligned_malloc's, private and anonymous, and the pages advised
// lie inside it.
static void es_cpu_clear_pages(ggml_backend_buffer_t b, uint8_t value) {
#if defined(__linux__)
	if (value == 0 && b->context != NULL) {
		uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
		uintptr_t base = (uintptr_t)b->context, end = base + b->size;
		uintptr_t lo = (base + page - 1) & ~(page - 1), hi = end & ~(page - 1);
		if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0) {
			memset((void *)base, 0, lo - base);
			memset((void *)hi, 0, end - hi);
			return;
		}
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

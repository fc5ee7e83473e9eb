// kvpages.h: a llama.cpp context's KV cache, cleared without touching it and handed
// back to the OS while the engine idles (kvpages.c). Declarations only: kvpages.c is compiled once, as its
// own translation unit, and context.go and kvpages.go call it.
#ifndef EMBED_STACK_KVPAGES_H
#define EMBED_STACK_KVPAGES_H

#include <stdbool.h>
#include <stddef.h>
#include "ggml-backend.h"

// es_clear_by_pages makes every buffer of ggml's CPU buffer type allocated from now
// on clear to zero by handing its whole pages back to the OS (Linux; elsewhere, and
// for other values, by memset as before). Idempotent.
void es_clear_by_pages(void);

// es_kv_pages records the host buffers that hold a context's KV cache.
struct es_kv_pages;

struct es_kv_pages *es_kv_pages_new(void);
void es_kv_pages_free(struct es_kv_pages *p);

// es_kv_probe is the context's graph callback (llama_context_params.cb_eval, with
// an es_kv_pages as its data): asked about each node before it is computed, it
// records the buffer of any KV cache tensor the node reads and asks for nothing,
// so the scheduler computes every split whole as it would without a callback.
bool es_kv_probe(struct ggml_tensor *t, bool ask, void *user_data);

// es_kv_release hands the whole pages of the recorded buffers that are ggml's CPU
// buffers back to the OS and returns the bytes advised (0 where none is recorded
// yet, or off Linux). They read as zeros when next touched.
size_t es_kv_release(struct es_kv_pages *p);

// es_kv_resident is how many bytes of the recorded CPU buffers' whole pages are
// resident (mincore), and in *total those pages' size: for tests.
size_t es_kv_resident(struct es_kv_pages *p, size_t *total);

#endif

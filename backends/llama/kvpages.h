// kvpages.h: a llama.cpp context's KV cache, cleared without touching it and handed
// back to the OS while the engine idles (kvpages.c). Declarations only: kvpages.c
// is compiled once, as its own translation unit.
#ifndef EMBED_STACK_KVPAGES_H
#define EMBED_STACK_KVPAGES_H

#include <stdbool.h>
#include <stddef.h>
#include "ggml-backend.h"

// es_clear_by_pages makes every buffer of ggml's CPU buffer type allocated from now
// on clear to zero by handing its whole pages back to the OS (Linux; elsewhere, and
// for other values, by memset as before). Idempotent.
void es_clear_by_pages(void);

// es_kv_pages records the buffers of a context's KV cache.
struct es_kv_pages;

struct es_kv_pages *es_kv_pages_new(void);
void es_kv_pages_free(struct es_kv_pages *p);

// es_kv_capture has the buffers cleared by pages on this thread from now on
// recorded in p (NULL: none); es_init_context brackets llama_init_from_model with it.
void es_kv_capture(struct es_kv_pages *p);

// es_kv_release clears the recorded buffers again, handing their pages back to the
// OS, and returns their size (0 where none is recorded: off Linux, or on a GPU).
// They read as zeros when next touched.
size_t es_kv_release(struct es_kv_pages *p);

// es_kv_resident is how many bytes of the recorded buffers' whole pages are
// resident (mincore), and in *total those pages' size: for tests.
size_t es_kv_resident(struct es_kv_pages *p, size_t *total);

#endif

// lifetime.h: freeing a llama.cpp context whose device's backend has a reset
// (lifetime.c). Declarations only: lifetime.c is compiled once, as its own
// translation unit, and lifetime.go and context.go call it.
#ifndef EMBED_STACK_LIFETIME_H
#define EMBED_STACK_LIFETIME_H

#include <stdbool.h>
#include "ggml-backend.h"
#include "llama.h"

// es_hook_device makes the backends dev creates from now on that have a reset
// (CUDA's) outlive the scheduler of the context that holds them, when that context
// is freed with es_context_free. Idempotent; false when 16 devices are hooked.
bool es_hook_device(ggml_backend_dev_t dev);

// es_context_free is llama_free, with the backends of hooked devices freed after
// it returns rather than inside it, before the context's scheduler is.
void es_context_free(struct llama_context *ctx);

// es_probe_resets is for the test of this file, which has no GPU: while on, each
// backend a hooked device creates without a reset gets one that counts its calls
// and, in *late, the calls on a backend already freed. Turning it on zeroes both;
// it returns the calls counted so far.
int es_probe_resets(bool on, int *late);

#endif

// accel.h: embed-stack's own ggml backend (accel.c), the kernels ggml's CPU
// backend lacks for encoders. Declarations only: accel.c is compiled once, as its
// own translation unit, and accel.go calls it.
#ifndef EMBED_STACK_ACCEL_H
#define EMBED_STACK_ACCEL_H

#include <stdbool.h>
#include <stddef.h>
#include "ggml.h"
#include "llama.h"

// Operations the device may take (es_accel_set_ops), as bits.
// ES_ACCEL_OP_BF16 is read as a model loads: its BF16 matrices are repacked for the
// device then, and stay the device's. ES_ACCEL_OP_ATTN is flash attention over a
// BF16 KV cache (a decoder's long sequences). ES_ACCEL_OP_HEAD is a decoder's LM
// head (the graph's "result_output" product), which the device takes and leaves
// unwritten: the engine reads hidden states, never logits. ES_ACCEL_OP_Q8 is
// products with Q8_0 matrices, through the BF16 kernels (AVX512_BF16 CPUs), read as
// a model loads: the matrices the device then holds, in the file's layout, are its
// own for the model's life (their products in calls of enough rows).
enum {
	ES_ACCEL_OP_KQ = 1,
	ES_ACCEL_OP_GELU = 2,
	ES_ACCEL_OP_WEIGHTS = 4,
	ES_ACCEL_OP_BF16 = 8,
	ES_ACCEL_OP_ATTN = 16,
	ES_ACCEL_OP_HEAD = 32,
	ES_ACCEL_OP_Q8 = 64,
	ES_ACCEL_OP_ALL = 127
};

// Kernel sets for es_accel_register: the best this CPU runs, or one forced.
enum { ES_ACCEL_ISA_AUTO = 0, ES_ACCEL_ISA_AVX2 = 1, ES_ACCEL_ISA_AVX512 = 2 };

// es_accel_register registers the device with ggml's registry, once per process,
// uses the kernel set isa names for the contexts created after it, and returns the
// device's description; NULL when this CPU has neither AVX-512F nor AVX2 with FMA
// (nothing registered) or lacks the set asked for.
const char *es_accel_register(int isa);

// es_accel_bf16_products says whether the device multiplies BF16 weight matrices
// (repacked at load) with AVX512_BF16's dot products: registered with the AVX-512
// kernels on a CPU with AVX512_BF16, on, and BF16 products among its operations.
bool es_accel_bf16_products(void);

// es_accel_bf16_attention says whether the device computes flash attention over a
// BF16 K and V cache (AVX512_BF16's dot products, tiles of 32 queries by 32 cells)
// for heads of these widths: registered with the AVX-512 kernels on a CPU with
// AVX512_BF16, on, attention among its operations, an even key width and a value
// width a multiple of 16, both at most 256. A decoder's long context asks for that
// cache where it does.
bool es_accel_bf16_attention(int64_t key_length, int64_t value_length);

// es_accel_bf16_fma says whether the device's BF16 operations (products with BF16
// weights, flash attention over a BF16 cache) compute in float32 FMAs over values
// widened from BF16 (Intel's CPUs, whose BF16 dot products are the slower
// arithmetic) rather than in AVX512_BF16's dot products (the others).
bool es_accel_bf16_fma(void);

// es_accel_set_bf16_fma forces that arithmetic: FMAs (1), BF16 dot products (0),
// or the CPU's choice (-1, the default). For tests and measurements.
void es_accel_set_bf16_fma(int fma);

// es_accel_set_bf16_dot(0) has the next es_accel_register treat the CPU as one
// without AVX512_BF16 (its BF16 products in FMAs, the activations rounded without
// the instruction, no flash attention or Q8_0 products in the kernels); -1 restores
// detection. For tests and measurements of the CPUs that lack it.
void es_accel_set_bf16_dot(int dot);

// es_accel_bf16_amx says whether the device's products with BF16 weights (and the
// Q8_0 ones it takes) run in AMX tiles (1) or not (0): by default where the CPU has
// AMX-TILE and AMX-BF16 (Intel's from Sapphire Rapids on) and the OS granted the
// process their state, unless the environment's EMBED_STACK_AMX is off or 0.
int es_accel_bf16_amx(void);

// es_accel_set_bf16_amx forces that use: 0 or 1 where the CPU allows, -1 the
// default. For tests and measurements.
void es_accel_set_bf16_amx(int mode);

// es_accel_test_pool runs jobs small jobs on a pool of n_threads threads (its
// workers lingering where linger is set) and returns how many tasks ran outside
// the job that was running. For tests.
long es_accel_test_pool(int n_threads, int jobs, bool linger);

// es_accel_test_flash_attn computes dst (a FLASH_ATTN_EXT whose sources are set)
// with the device's kernel on n_threads threads, in its exact form (the one a
// context packing sequences uses; es_init_context) where exact is set; -1 when
// the device would not take it. For tests.
int es_accel_test_flash_attn(struct ggml_tensor *dst, int n_threads, bool exact);

// es_accel_set_enabled makes the device take operations (true, the default) or none.
// Contexts created after the change follow it.
void es_accel_set_enabled(bool on);

// es_accel_set_ops limits the device to the operations ops names (ES_ACCEL_OP_*).
void es_accel_set_ops(int ops);

// es_accel_set_packed_budget bounds the bytes of packed weight copies in the
// process (2 GiB by default); past it products pack their panels as they go.
void es_accel_set_packed_budget(size_t bytes);

// es_accel_computed_ops counts the operations the device computed in this process.
long long es_accel_computed_ops(void);
// es_accel_skipped_heads counts the LM heads (ES_ACCEL_OP_HEAD) the device left
// uncomputed in this process.
long long es_accel_skipped_heads(void);
// es_accel_q8_products counts the products with Q8_0 matrices the device computed
// in this process (ES_ACCEL_OP_Q8).
long long es_accel_q8_products(void);
// es_accel_q8_mapped is how many Q8_0 matrices the last model loaded (es_model_load)
// left mapped from its file in the device's buffer type, for the tests that check
// the device's Q8_0 products cost no copy of the weights.
long es_accel_q8_mapped(void);

// es_accel_test_compute computes dst (a MUL_MAT or GELU whose sources are set) with
// the device's kernels on n_threads threads, the AVX2 ones when avx2 is set; -1
// when the device would not take it. For tests: it changes the kernels in use
// while it runs.
int es_accel_test_compute(struct ggml_tensor *dst, int n_threads, int avx2);

// es_accel_test_bf16 computes dst = mul_mat(w, x), w a BF16 matrix holding its
// values (or a Q8_0 one, not packed) and x F32, with the device's BF16 kernels on
// n_threads threads: with
// packed set from w stored in the device's buffer type as llama.cpp's loader
// stores a weight (repacked into panels), then read back (-3 when it was not
// repacked, -2 when it reads back different); else from w as it is, packed per
// product. -1 when the kernels in use have no BF16 product. For tests.
int es_accel_test_bf16(struct ggml_tensor *dst, int n_threads, int packed);

// es_accel_test_bf16_convert rounds n floats (n even) to n/2 BF16 pairs with the
// AVX2 kernels' conversion (avx2 set) or AVX512_BF16's; -1 where the CPU lacks it.
int es_accel_test_bf16_convert(uint32_t *dst, const float *x, int64_t n, int avx2);

// es_keep_freed_mapped tunes glibc's malloc so that freed memory stays mapped:
// llama_free reads its context's freed backends (accel.c says why). Called once,
// before the first model or context.
void es_keep_freed_mapped(void);

// es_model_load is llama_model_load_from_file, also saying how many of the model's
// matrices the device took as it loaded: BF16 ones repacked or mapped as panels,
// Q8_0 ones in the file's layout (0: it holds none of them). A file holding matrices as the kernels' panels (a copy
// package weights converted for them) fails with NULL and *repacked
// ES_PANELS_UNREADABLE where no kernel here reads them (the device off, a CPU
// without AVX512_BF16, panels of another width), or ES_PANELS_NOT_TAKEN where one
// of them went to another backend's buffer.
enum { ES_PANELS_NOT_TAKEN = -1, ES_PANELS_UNREADABLE = -2 };
// With q8 set (an embedding model, not a reranker) the device takes the model's
// Q8_0 matrices too, where ES_ACCEL_OP_Q8 and a CPU with AVX512_BF16 let it.
struct llama_model *es_model_load(const char *path, struct llama_model_params params, bool q8, long *repacked);

// es_init_context is llama_init_from_model, where embed-stack's device, if the
// context has it and kernel_threads is positive, keeps kernel_threads threads
// whatever llama.cpp's n_threads says, and *kernels is its backend for
// es_kernels_alone (else NULL). With exact_attention the device's flash attention
// gives a query the same bits wherever its sequence lies in the KV cache (a
// context that packs sequences). kv, when not NULL, records the KV cache's
// buffers for es_kv_release (kvpages.h).
struct es_kv_pages;
struct llama_context *es_init_context(struct llama_model *model, struct llama_context_params params, int kernel_threads,
                                      bool exact_attention, void **kernels, struct es_kv_pages *kv);

// es_kernels_alone says whether the device's workers compute the next calls alone,
// ggml's operations between theirs on the caller only (n_threads 1): they then wait
// for their next job awake for a millisecond instead of a few microseconds.
void es_kernels_alone(void *kernels, bool alone);

// es_threadpool_attach gives ctx a pool of n_threads CPU threads that lives as long
// as the context (NULL, none attached, for one thread).
void *es_threadpool_attach(struct llama_context *ctx, int n_threads);

// es_threadpool_free detaches and frees the pool es_threadpool_attach gave ctx.
void es_threadpool_free(struct llama_context *ctx, void *tp);

#endif

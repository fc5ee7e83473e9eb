// accel.c: embed-stack's own ggml backend, a second CPU device ("ESK") that takes
// over the few operations ggml's CPU backend computes slowly for encoders, and
// leaves every other operation to it.
//
// Why a backend: llama.cpp builds an encoder's attention without flash attention as
// KQ = mul_mat(K, Q) with both operands permuted views, and ggml's CPU backend hands
// a product to its matrix kernels (tinyBLAS) only when the second operand is
// contiguous; KQ instead runs one dot product of head_dim floats per output cell,
// each ending in a horizontal sum. On all-MiniLM-L6-v2 (head_dim 32) that was a
// quarter of the encoder's time for 3% of its arithmetic. GELU is the other: ggml
// computes it one value at a time through an f16 table. Neither can be changed
// without patching llama.cpp or ggml, which this project links unmodified; ggml's
// scheduler, though, gives an operation to the first backend that supports it when
// its operands sit in a buffer that backend can use (pass 3 of
// ggml_backend_sched_split_graph, the path ggml's BLAS backend takes), and
// llama.cpp adds every registered device of type ACCEL to each context. So this
// device uses the CPU backend's own buffer type, claims exactly those operations,
// and the scheduler splits each layer between it and the CPU backend; both read and
// write host memory, so no tensor is copied.
//
// The kernels need AVX-512F or AVX2 with FMA, picked at run time with
// target attributes, so the portable build carries them; on other CPUs (and other
// architectures) es_accel_register registers nothing.
//
// Threads: llama.cpp sets each backend's thread count through the registry's
// "ggml_backend_set_n_threads"; the backend keeps that many minus one workers that
// spin briefly, then sleep, between operations.

#include "accel.h"
#include "kvpages.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "ggml-backend-impl.h"
#include "ggml-cpu.h"
#include "gguf.h"

#if defined(__x86_64__) || defined(_M_X64)
#define ES_ACCEL_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#endif

enum { ES_ISA_NONE = 0, ES_ISA_AVX2 = 1, ES_ISA_AVX512 = 2 };

static int es_accel_isa_detect(void) {
#if ES_ACCEL_X86
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f")) {
		return ES_ISA_AVX512;
	}
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
		return ES_ISA_AVX2;
	}
#endif
	return ES_ISA_NONE;
}

// The kernels in use (ES_ISA_*), and whether the device takes operations at all:
// es_accel_set_enabled switches it off for a comparison in the same process.
static int es_accel_isa;
static atomic_int es_accel_on = 1;
// Which operations it takes (ES_ACCEL_OP_*), for measuring one against another.
static atomic_int es_accel_ops = ES_ACCEL_OP_ALL;
// Operations computed, for the tests that check the device took them.
static atomic_llong es_accel_computed;
static atomic_llong es_accel_heads_skipped;
static atomic_llong es_accel_q8_computed;

// ---------------------------------------------------------------------------
// Thread pool

typedef void (*es_task_fn)(void *arg, int task, int thread);

// What a job runs: its function, argument and tasks.
struct es_job {
	_Atomic(es_task_fn) fn;
	_Atomic(void *) arg;
	atomic_int n_tasks;
};

// A job is published by bumping gen; its tasks are claimed from next, whose high
// 32 bits name the job, so a worker that wakes late (after its job was done, or
// while the next one runs) claims nothing. Job g's fn, arg and n_tasks sit in
// jobs[g & 1], written before g is published and not again until job g + 2, which
// comes after next has named g + 1: so whenever a claim of job g succeeds, what
// the worker read from jobs[g & 1] is job g's. With the three in one place, a
// worker that read gen g while the caller was already writing job g + 1's could
// pair g + 1's task count with g's spent next and claim a task past g's end, then
// run it on an argument whose frame was gone (a SIGSEGV in es_fa_tile, one bench
// run in three on 2026-12-04) and count it in the next job's done. The caller
// waits for done == n_tasks, not for the workers: one the kernel has not
// scheduled yet costs nothing (on a loaded host waiting for it cost more than
// the job).
struct es_pool {
	int n_threads; // including the caller
	pthread_t *workers;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	atomic_uint gen;
	atomic_uint_fast64_t next; // gen << 32 | next task index
	atomic_int done;           // tasks finished in the current job
	struct es_job jobs[2];     // job g's in jobs[g & 1]
	atomic_bool quit;
	atomic_int sleeping; // workers waiting on wake
	// linger: the workers spin ES_LINGER_NS after a job before they sleep, while
	// the pool computes a forward alone (es_kernels_alone).
	atomic_bool linger;
};

// es_pool_claim runs tasks of job g until none is left or the job is no longer g.
static void es_pool_claim(struct es_pool *p, unsigned g, es_task_fn fn, void *arg, int n, int thread) {
	for (;;) {
		uint_fast64_t v = atomic_load_explicit(&p->next, memory_order_acquire);
		if ((unsigned)(v >> 32) != g || (int)(uint32_t)v >= n) {
			return;
		}
		if (!atomic_compare_exchange_weak_explicit(&p->next, &v, v + 1, memory_order_acq_rel, memory_order_relaxed)) {
			continue;
		}
		fn(arg, (int)(uint32_t)v, thread);
		atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
	}
}

struct es_worker_arg {
	struct es_pool *pool;
	int index;
};

// A worker spins this many rounds (a few microseconds) for the next job before it
// sleeps: the device's next operation is usually hundreds of microseconds away
// while ggml's CPU threads need the cores, and a long spin measured 4x slower on
// two threads.
#define ES_WORKER_SPIN 256
#define ES_CALLER_SPIN 20000

// A lingering pool's workers (es_kernels_alone) spin this long after a job. There
// ggml's CPU operations between two of the device's run on the caller alone, so no
// other pool needs the cores, and a worker that slept there was woken a couple of
// hundred times a forward: after an idle spell each wake of a halted virtual CPU
// cost this VM about 0.2 ms, and one short query took 84 to 96 ms instead of 38
// (docs/performance.md). A millisecond bridges the caller's operations of a short
// call; a long call's take longer, where a wake is cheap beside them.
#define ES_LINGER_NS 1000000

static int64_t es_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *es_worker(void *a) {
	struct es_worker_arg *wa = a;
	struct es_pool *p = wa->pool;
	int index = wa->index;
	free(wa);
	unsigned seen = atomic_load(&p->gen);
	for (;;) {
		int spins = 0;
		bool linger = atomic_load_explicit(&p->linger, memory_order_relaxed);
		int64_t since = linger ? es_now_ns() : 0;
		while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && !atomic_load(&p->quit)) {
			if (++spins < ES_WORKER_SPIN || (linger && (spins % 64 != 0 || es_now_ns() - since < ES_LINGER_NS))) {
#if ES_ACCEL_X86
				_mm_pause();
#endif
				continue;
			}
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleeping, 1);
			while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) {
				pthread_cond_wait(&p->wake, &p->mu);
			}
			atomic_fetch_sub(&p->sleeping, 1);
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->quit)) {
			return NULL;
		}
		seen = atomic_load_explicit(&p->gen, memory_order_acquire);
		struct es_job *job = &p->jobs[seen & 1];
		es_task_fn fn = atomic_load_explicit(&job->fn, memory_order_acquire);
		void *arg = atomic_load_explicit(&job->arg, memory_order_acquire);
		int n = atomic_load_explicit(&job->n_tasks, memory_order_acquire);
		es_pool_claim(p, seen, fn, arg, n, index);
	}
}

static void es_pool_stop(struct es_pool *p) {
	if (p->workers == NULL) {
		return;
	}
	pthread_mutex_lock(&p->mu);
	atomic_store(&p->quit, true);
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n_threads - 1; i++) {
		pthread_join(p->workers[i], NULL);
	}
	free(p->workers);
	p->workers = NULL;
	atomic_store(&p->quit, false);
}

static void es_pool_start(struct es_pool *p, int n_threads) {
	es_pool_stop(p);
	p->n_threads = n_threads < 1 ? 1 : n_threads;
	if (p->n_threads == 1) {
		return;
	}
	p->workers = calloc((size_t)p->n_threads - 1, sizeof(pthread_t));
	int started = 0;
	for (int i = 0; i < p->n_threads - 1; i++) {
		struct es_worker_arg *wa = malloc(sizeof *wa);
		wa->pool = p;
		wa->index = i + 1;
		if (pthread_create(&p->workers[i], NULL, es_worker, wa) != 0) {
			free(wa);
			break;
		}
		started++;
	}
	p->n_threads = started + 1;
	if (started == 0) {
		free(p->workers);
		p->workers = NULL;
	}
}

// es_pool_run runs fn over tasks 0..n_tasks-1 on the caller and the workers.
static void es_pool_run(struct es_pool *p, int n_tasks, es_task_fn fn, void *arg) {
	if (p->n_threads <= 1 || n_tasks <= 1) {
		for (int t = 0; t < n_tasks; t++) {
			fn(arg, t, 0);
		}
		return;
	}
	unsigned g = atomic_load(&p->gen) + 1;
	struct es_job *job = &p->jobs[g & 1];
	atomic_store_explicit(&job->fn, fn, memory_order_relaxed);
	atomic_store_explicit(&job->arg, arg, memory_order_relaxed);
	atomic_store_explicit(&job->n_tasks, n_tasks, memory_order_relaxed);
	atomic_store_explicit(&p->done, 0, memory_order_relaxed);
	atomic_store_explicit(&p->next, (uint_fast64_t)g << 32, memory_order_release);
	atomic_store_explicit(&p->gen, g, memory_order_release);
	if (atomic_load(&p->sleeping) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->wake);
		pthread_mutex_unlock(&p->mu);
	}
	es_pool_claim(p, g, fn, arg, n_tasks, 0);
	// The tasks left are running on workers: wait for them, briefly spinning.
	int spins = 0;
	while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) {
		if (++spins < ES_CALLER_SPIN) {
#if ES_ACCEL_X86
			_mm_pause();
#endif
		} else {
			sched_yield();
		}
	}
}

// ---------------------------------------------------------------------------
// Kernels

// Per-thread packing buffer: B of one batch transposed to [K][Npad].
struct es_scratch {
	float *buf;
	size_t cap;
	const char *packed_b; // which B it holds
	int64_t packed_n;
};

// A product of this backend: dst[b][m][n] = sum_k A[b][m][k] * B[b'][n][k], with
// A = src1 (rows of K floats, any strides) and B = src0 (ditto, broadcast over the
// batch as ggml_mul_mat broadcasts it), dst contiguous in n.
struct es_mm {
	const char *a, *b;
	char *d;
	int64_t K, M, N;
	size_t a_row, b_row, d_row; // byte strides of a row (m, n, m)
	int64_t nb2, nb3;            // batch extents (dst ne2, ne3)
	int64_t r2, r3;              // broadcast ratios of B
	size_t a_s2, a_s3, b_s2, b_s3, d_s2, d_s3;
	int64_t m_block;
	int64_t m_blocks;
	struct es_scratch *scratch; // one per thread of the pool
};

#define ES_MAX_THREADS 256

static float *es_scratch_get(struct es_scratch *s, size_t n) {
	if (s->cap < n) {
		free(s->buf);
		s->buf = aligned_alloc(64, ((n * sizeof(float)) + 63) / 64 * 64);
		s->cap = n;
		s->packed_b = NULL;
	}
	return s->buf;
}

// es_pack_bt writes B's rows n = 0..N-1 (K floats each) as columns: bt[k*ldb + n],
// zero in the padding columns N..ldb-1.
static void es_pack_bt(float *bt, const char *b, size_t b_row, int64_t K, int64_t N, int64_t ldb) {
	for (int64_t n = 0; n < N; n++) {
		const float *row = (const float *)(b + (size_t)n * b_row);
		for (int64_t k = 0; k < K; k++) {
			bt[k * ldb + n] = row[k];
		}
	}
	for (int64_t k = 0; k < K; k++) {
		for (int64_t n = N; n < ldb; n++) {
			bt[k * ldb + n] = 0.0f;
		}
	}
}

#if ES_ACCEL_X86

// AVX-512: tiles of MR rows by 32 (two vectors) or 16 columns; the column tail
// is masked on store (bt's padding is zero, so its loads are whole vectors).
#define ES_MR512 8

__attribute__((target("avx512f"), always_inline)) static inline void
es_tile512(int mr, int nv, const float *const *arow, const float *bt, int64_t ldb, int64_t K,
           float *const *drow, int64_t n0, __mmask16 tail) {
	__m512 acc[ES_MR512][2];
	for (int r = 0; r < mr; r++) {
		acc[r][0] = _mm512_setzero_ps();
		acc[r][1] = _mm512_setzero_ps();
	}
	for (int64_t k = 0; k < K; k++) {
		const float *bk = bt + k * ldb + n0;
		__m512 b0 = _mm512_load_ps(bk);
		__m512 b1 = nv > 1 ? _mm512_load_ps(bk + 16) : b0;
		for (int r = 0; r < mr; r++) {
			__m512 a = _mm512_set1_ps(arow[r][k]);
			acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
			if (nv > 1) {
				acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
			}
		}
	}
	for (int r = 0; r < mr; r++) {
		if (nv > 1) {
			_mm512_storeu_ps(drow[r] + n0, acc[r][0]);
			_mm512_mask_storeu_ps(drow[r] + n0 + 16, tail, acc[r][1]);
		} else {
			_mm512_mask_storeu_ps(drow[r] + n0, tail, acc[r][0]);
		}
	}
}

__attribute__((target("avx512f"))) static void
es_rows512(int mr, const float *const *arow, const float *bt, int64_t ldb, int64_t K, int64_t N,
           float *const *drow) {
	int64_t n0 = 0;
#define ES_ROWS512(MR)                                                                        \
	for (; n0 + 32 <= N; n0 += 32) es_tile512(MR, 2, arow, bt, ldb, K, drow, n0, 0xffff); \
	if (N - n0 > 16) {                                                                     \
		es_tile512(MR, 2, arow, bt, ldb, K, drow, n0, (__mmask16)((1u << (N - n0 - 16)) - 1)); \
	} else if (N - n0 > 0) {                                                               \
		es_tile512(MR, 1, arow, bt, ldb, K, drow, n0,                                      \
		           (__mmask16)(N - n0 == 16 ? 0xffff : (1u << (N - n0)) - 1));             \
	}
	switch (mr) {
	case 8: ES_ROWS512(8) break;
	case 7: ES_ROWS512(7) break;
	case 6: ES_ROWS512(6) break;
	case 5: ES_ROWS512(5) break;
	case 4: ES_ROWS512(4) break;
	case 3: ES_ROWS512(3) break;
	case 2: ES_ROWS512(2) break;
	default: ES_ROWS512(1) break;
	}
#undef ES_ROWS512
}

// AVX2: tiles of MR rows by 16 (two vectors) or 8 columns, the tail stored lane
// by lane.
#define ES_MR256 6

__attribute__((target("avx2,fma"), always_inline)) static inline void
es_tile256(int mr, int nv, const float *const *arow, const float *bt, int64_t ldb, int64_t K,
           float *const *drow, int64_t n0, int64_t nvalid) {
	__m256 acc[ES_MR256][2];
	for (int r = 0; r < mr; r++) {
		acc[r][0] = _mm256_setzero_ps();
		acc[r][1] = _mm256_setzero_ps();
	}
	for (int64_t k = 0; k < K; k++) {
		const float *bk = bt + k * ldb + n0;
		__m256 b0 = _mm256_load_ps(bk);
		__m256 b1 = nv > 1 ? _mm256_load_ps(bk + 8) : b0;
		for (int r = 0; r < mr; r++) {
			__m256 a = _mm256_broadcast_ss(arow[r] + k);
			acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
			if (nv > 1) {
				acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
			}
		}
	}
	for (int r = 0; r < mr; r++) {
		if (nvalid == 8 * nv) {
			_mm256_storeu_ps(drow[r] + n0, acc[r][0]);
			if (nv > 1) {
				_mm256_storeu_ps(drow[r] + n0 + 8, acc[r][1]);
			}
		} else {
			float tmp[16] __attribute__((aligned(32)));
			_mm256_store_ps(tmp, acc[r][0]);
			_mm256_store_ps(tmp + 8, acc[r][1]);
			for (int64_t j = 0; j < nvalid; j++) {
				drow[r][n0 + j] = tmp[j];
			}
		}
	}
}

__attribute__((target("avx2,fma"))) static void
es_rows256(int mr, const float *const *arow, const float *bt, int64_t ldb, int64_t K, int64_t N,
           float *const *drow) {
	int64_t n0 = 0;
#define ES_ROWS256(MR)                                                                          \
	for (; n0 + 16 <= N; n0 += 16) es_tile256(MR, 2, arow, bt, ldb, K, drow, n0, 16);       \
	if (N - n0 > 8) {                                                                        \
		es_tile256(MR, 2, arow, bt, ldb, K, drow, n0, N - n0);                               \
	} else if (N - n0 > 0) {                                                                 \
		es_tile256(MR, 1, arow, bt, ldb, K, drow, n0, N - n0);                               \
	}
	switch (mr) {
	case 6: ES_ROWS256(6) break;
	case 5: ES_ROWS256(5) break;
	case 4: ES_ROWS256(4) break;
	case 3: ES_ROWS256(3) break;
	case 2: ES_ROWS256(2) break;
	default: ES_ROWS256(1) break;
	}
#undef ES_ROWS256
}

#endif // ES_ACCEL_X86

// es_mm_task computes one block of M_block rows of one batch.
static void es_mm_task(void *arg, int task, int thread) {
	const struct es_mm *mm = arg;
	int64_t batch = task / mm->m_blocks;
	int64_t mb = task % mm->m_blocks;
	int64_t i2 = batch % mm->nb2, i3 = batch / mm->nb2;
	const char *a = mm->a + i2 * mm->a_s2 + i3 * mm->a_s3;
	const char *b = mm->b + (i2 / mm->r2) * mm->b_s2 + (i3 / mm->r3) * mm->b_s3;
	char *d = mm->d + i2 * mm->d_s2 + i3 * mm->d_s3;

	int64_t ldb = (mm->N + 15) / 16 * 16;
	struct es_scratch *s = &mm->scratch[thread];
	float *bt = es_scratch_get(s, (size_t)(mm->K * ldb));
	if (s->packed_b != b || s->packed_n != mm->N) {
		es_pack_bt(bt, b, mm->b_row, mm->K, mm->N, ldb);
		s->packed_b = b;
		s->packed_n = mm->N;
	}
	int64_t m0 = mb * mm->m_block;
	int64_t m1 = m0 + mm->m_block < mm->M ? m0 + mm->m_block : mm->M;
	const int mr_max = es_accel_isa == ES_ISA_AVX512 ? 8 : 6;
	for (int64_t m = m0; m < m1; m += mr_max) {
		int mr = (int)(m1 - m < mr_max ? m1 - m : mr_max);
		const float *arow[8];
		float *drow[8];
		for (int r = 0; r < mr; r++) {
			arow[r] = (const float *)(a + (size_t)(m + r) * mm->a_row);
			drow[r] = (float *)(d + (size_t)(m + r) * mm->d_row);
		}
#if ES_ACCEL_X86
		if (es_accel_isa == ES_ISA_AVX512) {
			es_rows512(mr, arow, bt, ldb, mm->K, mm->N, drow);
		} else {
			es_rows256(mr, arow, bt, ldb, mm->K, mm->N, drow);
		}
#else
		(void)arow; // never registered without the x86 kernels
		(void)drow;
#endif
	}
}

static void es_mul_mat(struct es_pool *pool, struct es_scratch *scratch, struct ggml_tensor *dst) {
	const struct ggml_tensor *src0 = dst->src[0];
	const struct ggml_tensor *src1 = dst->src[1];
	struct es_mm mm = {
		.a = src1->data,
		.b = src0->data,
		.d = dst->data,
		.K = src0->ne[0],
		.M = src1->ne[1],
		.N = src0->ne[1],
		.a_row = src1->nb[1],
		.b_row = src0->nb[1],
		.d_row = dst->nb[1],
		.nb2 = dst->ne[2],
		.nb3 = dst->ne[3],
		.r2 = src1->ne[2] / src0->ne[2],
		.r3 = src1->ne[3] / src0->ne[3],
		.a_s2 = src1->nb[2],
		.a_s3 = src1->nb[3],
		.b_s2 = src0->nb[2],
		.b_s3 = src0->nb[3],
		.d_s2 = dst->nb[2],
		.d_s3 = dst->nb[3],
		.scratch = scratch,
	};
	// Blocks of rows small enough that every thread gets several, large enough
	// that packing B (K*N) stays small against the block's K*N*M_block.
	int64_t batches = mm.nb2 * mm.nb3;
	int64_t block = 64;
	while (block > 8 && batches * ((mm.M + block - 1) / block) < 4 * (int64_t)pool->n_threads) {
		block /= 2;
	}
	mm.m_block = block;
	mm.m_blocks = (mm.M + block - 1) / block;
	for (int t = 0; t < pool->n_threads; t++) {
		scratch[t].packed_b = NULL;
	}
	es_pool_run(pool, (int)(batches * mm.m_blocks), es_mm_task, &mm);
}

// ---------------------------------------------------------------------------
// Products with F32 weight matrices

#define ES_PANEL 32

// es_packed is one weight matrix (N rows of K floats) laid out as ceil(N/32) panels,
// each K rows of 32 floats (its columns n..n+31, zero past N): the layout the tile
// kernels stream. One copy per matrix in the process, shared by every backend (every
// llama.cpp context) that multiplies by it and freed with the last of them: a
// context never outlives its model, so while a copy is held the weights it was
// made from cannot be freed and their address reused by another model's.
struct es_packed {
	const void *w;
	int64_t K, N;
	size_t row;
	float *panels;
	size_t bytes;
	int refs;
	struct es_packed *next;
};

static pthread_mutex_t es_packed_mu = PTHREAD_MUTEX_INITIALIZER;
static struct es_packed *es_packed_list;
static size_t es_packed_bytes;

// Past this many bytes of packed copies a matrix is packed into scratch for each
// product instead: slower, but no more memory.
static size_t es_packed_budget = (size_t)2 << 30;

// es_weights is what one backend holds of es_packed_list.
struct es_weights {
	struct es_packed **held;
	int n, cap;
};

static void es_pack_panels(float *dst, const char *w, size_t w_row, int64_t K, int64_t N) {
	int64_t panels = (N + ES_PANEL - 1) / ES_PANEL;
	for (int64_t p = 0; p < panels; p++) {
		float *pd = dst + p * K * ES_PANEL;
		for (int64_t j = 0; j < ES_PANEL; j++) {
			int64_t n = p * ES_PANEL + j;
			if (n >= N) {
				for (int64_t k = 0; k < K; k++) {
					pd[k * ES_PANEL + j] = 0.0f;
				}
				continue;
			}
			const float *row = (const float *)(w + (size_t)n * w_row);
			for (int64_t k = 0; k < K; k++) {
				pd[k * ES_PANEL + j] = row[k];
			}
		}
	}
}

// es_weights_release drops a backend's hold on its copies, freeing those no
// backend holds any more.
static void es_weights_release(struct es_weights *ws) {
	pthread_mutex_lock(&es_packed_mu);
	for (int i = 0; i < ws->n; i++) {
		struct es_packed *p = ws->held[i];
		if (--p->refs > 0) {
			continue;
		}
		for (struct es_packed **pp = &es_packed_list; *pp != NULL; pp = &(*pp)->next) {
			if (*pp == p) {
				*pp = p->next;
				break;
			}
		}
		es_packed_bytes -= p->bytes;
		free(p->panels);
		free(p);
	}
	pthread_mutex_unlock(&es_packed_mu);
	free(ws->held);
	ws->held = NULL;
	ws->n = ws->cap = 0;
}

// es_weights_get returns w's panels, packing them on first use in the process and
// holding them for the backend; NULL past the budget.
static const float *es_weights_get(struct es_weights *ws, const struct ggml_tensor *w) {
	for (int i = 0; i < ws->n; i++) {
		struct es_packed *p = ws->held[i];
		if (p->w == w->data && p->K == w->ne[0] && p->N == w->ne[1] && p->row == w->nb[1]) {
			return p->panels;
		}
	}
	if (ws->n == ws->cap) {
		int cap = ws->cap ? 2 * ws->cap : 64;
		struct es_packed **held = realloc(ws->held, (size_t)cap * sizeof *held);
		if (held == NULL) {
			return NULL;
		}
		ws->held = held;
		ws->cap = cap;
	}
	pthread_mutex_lock(&es_packed_mu);
	struct es_packed *p = es_packed_list;
	for (; p != NULL; p = p->next) {
		if (p->w == w->data && p->K == w->ne[0] && p->N == w->ne[1] && p->row == w->nb[1]) {
			break;
		}
	}
	if (p == NULL) {
		int64_t K = w->ne[0], N = w->ne[1];
		size_t bytes = (size_t)((N + ES_PANEL - 1) / ES_PANEL) * (size_t)K * ES_PANEL * sizeof(float);
		float *panels = NULL;
		if (es_packed_bytes + bytes <= es_packed_budget) {
			panels = aligned_alloc(64, (bytes + 63) / 64 * 64);
		}
		if (panels == NULL) {
			pthread_mutex_unlock(&es_packed_mu);
			return NULL;
		}
		es_pack_panels(panels, w->data, w->nb[1], K, N);
		p = malloc(sizeof *p);
		*p = (struct es_packed){.w = w->data, .K = K, .N = N, .row = w->nb[1], .panels = panels, .bytes = bytes, .next = es_packed_list};
		es_packed_list = p;
		es_packed_bytes += bytes;
	}
	p->refs++;
	pthread_mutex_unlock(&es_packed_mu);
	ws->held[ws->n++] = p;
	return p->panels;
}

struct es_wmm {
	const char *a; // rows of K floats, a_row bytes apart
	size_t a_row;
	char *d; // rows of N floats, d_row bytes apart
	size_t d_row;
	int64_t M, K, N;
	const float *panels;     // packed, or NULL: pack each task's panels into scratch
	const struct ggml_tensor *w;
	struct es_scratch *scratch;
	int64_t panels_per_task;
};

// es_wmm_task computes every row for a group of panels (columns).
static void es_wmm_task(void *arg, int task, int thread) {
	const struct es_wmm *mm = arg;
	int64_t n_panels = (mm->N + ES_PANEL - 1) / ES_PANEL;
	int64_t p0 = task * mm->panels_per_task;
	int64_t p1 = p0 + mm->panels_per_task < n_panels ? p0 + mm->panels_per_task : n_panels;
	const int mr_max = es_accel_isa == ES_ISA_AVX512 ? 8 : 6;
	for (int64_t p = p0; p < p1; p++) {
		int64_t n0 = p * ES_PANEL;
		int64_t width = mm->N - n0 < ES_PANEL ? mm->N - n0 : ES_PANEL;
		const float *bt;
		if (mm->panels != NULL) {
			bt = mm->panels + p * mm->K * ES_PANEL;
		} else {
			float *buf = es_scratch_get(&mm->scratch[thread], (size_t)(mm->K * ES_PANEL));
			mm->scratch[thread].packed_b = NULL;
			es_pack_panels(buf, (const char *)mm->w->data + (size_t)n0 * mm->w->nb[1], mm->w->nb[1], mm->K, width);
			bt = buf;
		}
		for (int64_t m = 0; m < mm->M; m += mr_max) {
			int mr = (int)(mm->M - m < mr_max ? mm->M - m : mr_max);
			const float *arow[8];
			float *drow[8];
			for (int r = 0; r < mr; r++) {
				arow[r] = (const float *)(mm->a + (size_t)(m + r) * mm->a_row);
				drow[r] = (float *)(mm->d + (size_t)(m + r) * mm->d_row) + n0;
			}
#if ES_ACCEL_X86
			if (es_accel_isa == ES_ISA_AVX512) {
				es_rows512(mr, arow, bt, ES_PANEL, mm->K, width, drow);
			} else {
				es_rows256(mr, arow, bt, ES_PANEL, mm->K, width, drow);
			}
#else
			(void)arow; // never registered without the x86 kernels
			(void)drow;
			(void)bt;
			(void)width;
#endif
		}
	}
}

static void es_weight_mul_mat(struct es_pool *pool, struct es_scratch *scratch, struct es_weights *ws,
                              struct ggml_tensor *dst) {
	const struct ggml_tensor *w = dst->src[0], *x = dst->src[1];
	struct es_wmm mm = {
		.a = x->data,
		.a_row = x->nb[1],
		.d = dst->data,
		.d_row = dst->nb[1],
		.M = ggml_nrows(x), // contiguous: the batch dimensions are more rows
		.K = w->ne[0],
		.N = w->ne[1],
		.w = w,
		.scratch = scratch,
	};
	mm.panels = es_weights_get(ws, w);
	int64_t n_panels = (mm.N + ES_PANEL - 1) / ES_PANEL;
	// Several tasks per thread, for balance; each a group of whole panels.
	int64_t tasks = 4 * (int64_t)pool->n_threads;
	mm.panels_per_task = (n_panels + tasks - 1) / tasks;
	if (mm.panels_per_task < 1) {
		mm.panels_per_task = 1;
	}
	es_pool_run(pool, (int)((n_panels + mm.panels_per_task - 1) / mm.panels_per_task), es_wmm_task, &mm);
}

// ---------------------------------------------------------------------------
// Products with BF16 weight matrices, through AVX512_BF16
//
// ggml's CPU backend multiplies BF16 weights with tinyBLAS, reading each matrix in
// its row layout: on the AMD EPYC Zen 5 the 0.6B shape's whole graph reached 209
// GFLOP/s, 26% of the 794 GFLOP/s OpenVINO's BF16 product reaches on the same two
// cores. A kernel streaming the weights in panels of 32 columns, two K values
// interleaved per column (the operand order of vdpbf16ps), reached 760 GFLOP/s on
// 128x1024x3072 there. Such panels cannot sit beside the file's layout without
// doubling the weights' memory, so this device offers llama.cpp a buffer type
// (es_buft) that repacks a BF16 matrix as the loader writes it: llama.cpp stores a
// weight in the first buffer type of the ACCEL devices whose device takes the
// weight's operation (weight_buft_supported), and the scheduler then runs every
// product with that weight here, as the weight's buffer names this device first.
// The data of a repacked matrix is in no layout ggml's CPU kernels can read, so the
// device takes every product with one whatever es_accel_set_enabled says later.

#define ES_BF16_MR 12

// The mark in tensor->extra of a matrix repacked at load; a BF16 weight in this
// buffer type without it (written in pieces, or by a loader reading straight into
// host memory) is in the file's layout and packed per product.
static int es_bf16_packed_mark;

// Whether the device multiplies BF16 weight matrices: with its AVX-512 kernels
// (AVX512_BF16's dot products, or float32 FMAs over the panels widened, es_bf16_fma),
// or with its AVX2 ones (the FMAs in 256-bit vectors, es_bf16_fma256_rows).
static bool es_accel_bf16;

// Whether this CPU has AVX512_BF16 and the device uses its AVX-512 kernels: the
// operations written with its instructions (the dot products, the flash attention,
// the Q8_0 panels' conversion, AMX tiles) need it. The products of BF16 weights do
// not: on an AVX-512 CPU without it (Intel's Skylake-SP to Ice Lake) they run in
// es_bf16_fma_tile's FMAs, on AVX2 in es_bf16_fma256_rows', the activations rounded
// by es_bf16_convert256. es_accel_set_bf16_dot(0) makes a CPU
// that has it run as one that has not, for tests and measurements.
static bool es_bf16_dot;
static int es_bf16_dot_forced = -1;

// Whether the BF16 operations (products with BF16 weights, flash attention over a
// BF16 cache) compute in float32 FMAs over values widened from BF16
// (es_bf16_fma_tile, es_fa_tile_fma) rather than in AVX512_BF16's dot products:
// on Intel's CPUs, whose VDPBF16PS does half the arithmetic of their FMAs in the
// same time (es_accel_set_bf16_fma forces either).
static atomic_int es_bf16_fma;
static int es_bf16_fma_forced = -1;

// Matrices repacked on the calling thread: es_model_load reads it around a model's
// load to tell whether the device holds that model's weights.
static _Thread_local long es_bf16_packed_here;

// Whether the calling thread is in es_model_load: the device offers its own buffer
// type (es_buft) to the model loader only (es_dev_get_buffer_type).
static _Thread_local bool es_loading_model;

// A file whose BF16 matrices are already panels (a copy package weights converted
// for these kernels) names them under ES_PANELS_KEY, with ES_PANEL under
// ES_PANEL_WIDTH_KEY. While es_model_load loads one, es_load_panels is its metadata
// (on the loading thread), the device says it maps host memory, and llama.cpp then
// maps the file's range of this device's weights into an es_buft buffer instead of
// copying them (llama-model.cpp's buffer_from_host_ptr path, taken for a device's
// own buffer type): nothing is repacked at start, and the pages are the page
// cache's, shared by every worker of the model, where repacked panels were each
// worker's own memory. es_panels_taken counts the named matrices the device took.
#define ES_PANELS_KEY "embed_stack.bf16_panels"
#define ES_PANEL_WIDTH_KEY "embed_stack.bf16_panel_width"
static _Thread_local struct gguf_context *es_load_panels;
static _Thread_local long es_panels_taken;
// Q8_0 matrices mapped into es_buft (es_load_mapped) by the load on this thread,
// and by the last load on any thread to finish.
static _Thread_local long es_q8_mapped_here;
static _Atomic long es_accel_last_q8_mapped;

// es_file_backed says whether [lo, hi) lies in one mapping of a file (an inode in
// /proc/self/maps), as llama.cpp's mapping of the model is.
static bool es_file_backed(uintptr_t lo, uintptr_t hi) {
	FILE *f = fopen("/proc/self/maps", "r");
	if (f == NULL) {
		return false;
	}
	char line[512];
	bool file = false;
	while (fgets(line, sizeof line, f) != NULL) {
		unsigned long start, end, inode;
		if (sscanf(line, "%lx-%lx %*s %*x %*x:%*x %lu", &start, &end, &inode) == 3 && start <= lo && hi <= end) {
			file = inode != 0;
			break;
		}
	}
	fclose(f);
	return file;
}

// es_release_source drops this process's mapping of the pages of a matrix just
// repacked from llama.cpp's mapping of the file: they would otherwise stay resident
// beside the panels (a 0.6B BF16 model's worker held 3.5 GB instead of 2.4), and
// nothing reads them again. MADV_DONTNEED on a file mapping leaves the file's pages
// in the page cache, so the next worker to load the model still finds them there
// (MADV_PAGEOUT evicted them: the next start read the file from disk); on
// anonymous memory it would zero it, so only a file mapping is touched. Only whole
// pages inside the range are dropped.
static void es_release_source(const void *data, size_t size) {
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)data + page - 1) / page * page;
	uintptr_t hi = ((uintptr_t)data + size) / page * page;
	if (hi > lo && es_file_backed(lo, hi)) {
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
	}
}

// es_bf16_matrix says whether t is a BF16 matrix the kernels take: one matrix of
// rows of an even number of values, stored contiguously.
static bool es_bf16_matrix(const struct ggml_tensor *t) {
	return t->type == GGML_TYPE_BF16 && t->ne[2] == 1 && t->ne[3] == 1 && t->ne[0] % 2 == 0 &&
	       t->ne[0] >= 32 && t->ne[1] >= 16 && ggml_is_contiguous(t);
}

// es_bf16_packed_size is the bytes of t's panels: N rounded up to whole panels.
static size_t es_bf16_packed_size(const struct ggml_tensor *t) {
	return (size_t)((t->ne[1] + ES_PANEL - 1) / ES_PANEL) * ES_PANEL * (size_t)t->ne[0] * sizeof(uint16_t);
}

// es_listed_panels says whether t is a matrix the file being loaded holds as panels:
// named under ES_PANELS_KEY, and a matrix the kernels take whose panels are exactly
// its bytes (whole panels).
static bool es_listed_panels(const struct ggml_tensor *t) {
	if (es_load_panels == NULL || t->view_src != NULL || !es_bf16_matrix(t) || t->ne[1] % ES_PANEL != 0) {
		return false;
	}
	int64_t id = gguf_find_key(es_load_panels, ES_PANELS_KEY);
	size_t n = gguf_get_arr_n(es_load_panels, id);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(gguf_get_arr_str(es_load_panels, id, i), t->name) == 0) {
			return true;
		}
	}
	return false;
}

// es_bf16_pack writes rows n0..n0+width-1 of the BF16 matrix w (K values a row,
// w_row bytes apart) as panels: for panel p, K/2 groups of 32 columns by two
// values, [p][k/2][j][k%2], zero past width.
static void es_bf16_pack(uint16_t *dst, const char *w, size_t w_row, int64_t K, int64_t width) {
	int64_t panels = (width + ES_PANEL - 1) / ES_PANEL;
	for (int64_t p = 0; p < panels; p++) {
		uint32_t *pd = (uint32_t *)(dst + p * K * ES_PANEL);
		for (int64_t j = 0; j < ES_PANEL; j++) {
			int64_t n = p * ES_PANEL + j;
			if (n >= width) {
				for (int64_t kp = 0; kp < K / 2; kp++) {
					pd[kp * ES_PANEL + j] = 0;
				}
				continue;
			}
			const uint32_t *row = (const uint32_t *)(w + (size_t)n * w_row);
			for (int64_t kp = 0; kp < K / 2; kp++) {
				pd[kp * ES_PANEL + j] = row[kp];
			}
		}
	}
}

// es_bf16_repack packs a whole matrix of N rows (es_bf16_pack) on up to 8 threads:
// one thread moved about 2 GB/s, half a second of every worker's start on a 0.6B
// model and seconds on an 8B one; the page faults of the fresh panels are spread
// over the threads too.
struct es_repack {
	uint16_t *dst;
	const char *w;
	size_t w_row;
	int64_t K, N, panels;
};

static void es_repack_range(const struct es_repack *r, int64_t p0, int64_t p1) {
	for (int64_t p = p0; p < p1; p++) {
		int64_t n0 = p * ES_PANEL;
		int64_t width = r->N - n0 < ES_PANEL ? r->N - n0 : ES_PANEL;
		es_bf16_pack(r->dst + p * r->K * ES_PANEL, r->w + (size_t)n0 * r->w_row, r->w_row, r->K, width);
	}
}

struct es_repack_job {
	const struct es_repack *r;
	int64_t p0, p1;
};

static void *es_repack_thread(void *arg) {
	const struct es_repack_job *j = arg;
	es_repack_range(j->r, j->p0, j->p1);
	return NULL;
}

static void es_bf16_repack(uint16_t *dst, const char *w, size_t w_row, int64_t K, int64_t N) {
	struct es_repack r = {.dst = dst, .w = w, .w_row = w_row, .K = K, .N = N, .panels = (N + ES_PANEL - 1) / ES_PANEL};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
	// Small matrices are not worth a thread: under 4 MiB, one.
	if ((size_t)K * (size_t)N * sizeof(uint16_t) < (4u << 20) || r.panels < 2 * threads) {
		threads = 1;
	}
	struct es_repack_job jobs[8];
	pthread_t tids[8];
	bool started[8] = {false};
	int64_t per = (r.panels + threads - 1) / threads;
	for (int t = 1; t < threads; t++) {
		jobs[t] = (struct es_repack_job){.r = &r, .p0 = t * per, .p1 = (t + 1) * per < r.panels ? (t + 1) * per : r.panels};
		started[t] = jobs[t].p0 < jobs[t].p1 && pthread_create(&tids[t], NULL, es_repack_thread, &jobs[t]) == 0;
		if (!started[t] && jobs[t].p0 < jobs[t].p1) {
			es_repack_range(&r, jobs[t].p0, jobs[t].p1); // no thread: this one does it
		}
	}
	es_repack_range(&r, 0, per < r.panels ? per : r.panels);
	for (int t = 1; t < threads; t++) {
		if (started[t]) {
			pthread_join(tids[t], NULL);
		}
	}
}

// es_bf16_unpack is es_bf16_pack's inverse, for reading a repacked matrix back.
static void es_bf16_unpack(char *w, size_t w_row, const uint16_t *src, int64_t K, int64_t N) {
	for (int64_t n = 0; n < N; n++) {
		const uint32_t *pd = (const uint32_t *)(src + (n / ES_PANEL) * K * ES_PANEL);
		uint32_t *row = (uint32_t *)(w + (size_t)n * w_row);
		for (int64_t kp = 0; kp < K / 2; kp++) {
			row[kp] = pd[kp * ES_PANEL + n % ES_PANEL];
		}
	}
}

// ---------------------------------------------------------------------------
// Products with Q8_0 weight matrices, through the BF16 kernels
//
// ggml multiplies a Q8_0 matrix by rounding the activations to int8 blocks too and
// taking integer dot products along K, one output at a time: on the 0.6B shape it
// reached 103 to 113 tokens/s on 8 x 128 on an Emerald Rapids host, where the same
// file converted to BF16 panels (--weights bf16) reached 168, at 1.9 times the file's
// size. This device takes every product of an embedding model's Q8_0 matrices,
// and each task converts its panels from the file's blocks as it goes (es_q8_pack),
// into scratch, for the BF16 kernels: d x q, exact in float32, rounded to BF16 as
// package gguf converts it, so the vectors are those of the converted copy, bit for
// bit, with no copy on disk or in memory. The matrices stay in the file's layout,
// mapped from it (es_load_mapped).
//
// Every product, however few its rows: until 2026-12-04 calls under 64 rows stayed
// with ggml's int8 products, which read half the bytes and convert nothing, but sum
// in another order and round the activations to int8: a text's vector then
// depended on the size of the call it was decoded in (alone, or packed with
// others), and on its own in a short call fell below cosine 0.9999 to the float64
// forward pass over the file's values. A token's vector must not depend on its
// company (the exact cache returns what a fresh request computes), so the few-row
// calls pay the panels' conversion: docs/performance.md has what it costs.

// ggml's block_q8_0 (ggml-common.h, not installed): 32 int8 values and their F16
// scale.
struct es_q8_block {
	uint16_t d;
	int8_t qs[32];
};
_Static_assert(sizeof(struct es_q8_block) == 34, "a Q8_0 block is 34 bytes");

// Whether the model es_model_load is loading lets the device take its Q8_0 matrices
// (not a reranker's, whose scores the tests hold to ggml's; and the switches on),
// and whether the file's range of them is mapped into es_buft rather than copied
// (a file without BF16 matrices to repack, loaded with mmap).
static _Thread_local bool es_load_q8;
static _Thread_local bool es_load_mapped;

// es_q8_matrix says whether t is a Q8_0 matrix the kernels take: one matrix,
// stored contiguously, of at least one block a row and 16 rows.
static bool es_q8_matrix(const struct ggml_tensor *t) {
	return t->type == GGML_TYPE_Q8_0 && t->ne[2] == 1 && t->ne[3] == 1 && t->ne[0] % 32 == 0 && t->ne[1] >= 16 &&
	       ggml_is_contiguous(t);
}

#if ES_ACCEL_X86
// es_transpose16 transposes 16 vectors of 16 32-bit values: r[i][c] becomes r[c][i]
// (pairs within 128-bit lanes, then quads, then lanes between vectors twice).
__attribute__((target("avx512f"), always_inline)) static inline void es_transpose16(__m512i r[16]) {
	__m512i t[16];
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
	for (int i = 0; i < 16; i += 4) {
		r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
		r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
		r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
		r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
	for (int i = 0; i < 16; i += 8) {
		for (int k = 0; k < 4; k++) {
			t[i + k] = _mm512_shuffle_i32x4(r[i + k], r[i + k + 4], 0x88);
			t[i + k + 4] = _mm512_shuffle_i32x4(r[i + k], r[i + k + 4], 0xdd);
		}
	}
	for (int k = 0; k < 8; k++) {
		r[k] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0x88);
		r[k + 8] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0xdd);
	}
}

// es_q8_pack writes rows 0..width-1 (width <= ES_PANEL) of the Q8_0 matrix w (K
// values a row, w_row bytes apart) as one panel of es_bf16_pack's layout, zero
// past width. Block by block: each row's 32 values widened, scaled and rounded to
// 16 BF16 pairs in one vector, and every 16 rows' vectors transposed into the
// block's 16 pair rows of the panel, stored whole. (Scattering each row's pairs
// down its column instead cost about 4 cycles a value, its stores spread over the
// whole panel: a 4 x 16 call ran at two thirds of ggml's speed.)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c"))) static void
es_q8_pack(uint16_t *dst, const char *w, size_t w_row, int64_t K, int64_t width) {
	uint32_t *pd = (uint32_t *)dst;
	for (int64_t b = 0; b < K / 32; b++) {
		for (int half = 0; half < ES_PANEL / 16; half++) {
			__m512i v[16];
			for (int jj = 0; jj < 16; jj++) {
				int64_t j = half * 16 + jj;
				if (j >= width) {
					v[jj] = _mm512_setzero_si512();
					continue;
				}
				const struct es_q8_block *blk = (const struct es_q8_block *)(w + (size_t)j * w_row) + b;
				__m512 d = _mm512_set1_ps(_cvtsh_ss(blk->d));
				__m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk->qs)));
				__m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk->qs + 16))));
				v[jj] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, d), _mm512_mul_ps(lo, d));
			}
			es_transpose16(v);
			for (int p = 0; p < 16; p++) {
				_mm512_storeu_si512(pd + (b * 16 + p) * ES_PANEL + half * 16, v[p]);
			}
		}
	}
}
#endif

struct es_bmm {
	const struct ggml_tensor *x; // the F32 operand, rows of K values at any strides
	uint32_t *a;                 // x in BF16 pairs, M rows of K/2
	float *af;                   // with es_bf16_fma, x rounded to BF16 as floats in blocks of ES_BF16_MR rows, K-major; else NULL
	char *d;                     // rows of N floats, d_row bytes apart
	size_t d_row;
	int64_t M, K, N;
	const uint16_t *panels; // repacked at load, or NULL: pack each task's panels
	const struct ggml_tensor *w;
	struct es_scratch *scratch;
	int64_t panels_per_task;
	int64_t rows_per_task;
	bool amx;  // the panels' products in AMX tiles (es_amx_panel)
	bool avx2; // in AVX2's FMAs (es_bf16_fma256_rows), the device's AVX2 kernels being in use
};

#if ES_ACCEL_X86
// es_bf16_tile computes rows r < mr (a constant where inlined) of a panel's 32
// columns: per pair of K values, two loads of the panel and one broadcast pair a row.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) static inline void
es_bf16_tile(const int mr, const uint32_t *a, int64_t lda, const uint16_t *b, int64_t K2,
             float *const *drow, __mmask16 m0, __mmask16 m1) {
	__m512 acc[ES_BF16_MR][2];
	for (int r = 0; r < mr; r++) {
		acc[r][0] = _mm512_setzero_ps();
		acc[r][1] = _mm512_setzero_ps();
	}
	for (int64_t kp = 0; kp < K2; kp++) {
		__m512bh b0 = (__m512bh)_mm512_load_si512(b + kp * 64);
		__m512bh b1 = (__m512bh)_mm512_load_si512(b + kp * 64 + 32);
		for (int r = 0; r < mr; r++) {
			__m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * lda + kp]);
			acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
			acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
		}
	}
	for (int r = 0; r < mr; r++) {
		_mm512_mask_storeu_ps(drow[r], m0, acc[r][0]);
		_mm512_mask_storeu_ps(drow[r] + 16, m1, acc[r][1]);
	}
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
es_bf16_rows(int mr, const uint32_t *a, int64_t lda, const uint16_t *b, int64_t K2, float *const *drow,
             __mmask16 m0, __mmask16 m1) {
	switch (mr) {
#define ES_BF16_CASE(R) \
	case R: es_bf16_tile(R, a, lda, b, K2, drow, m0, m1); break;
	ES_BF16_CASE(12) ES_BF16_CASE(11) ES_BF16_CASE(10) ES_BF16_CASE(9) ES_BF16_CASE(8) ES_BF16_CASE(7)
	ES_BF16_CASE(6) ES_BF16_CASE(5) ES_BF16_CASE(4) ES_BF16_CASE(3) ES_BF16_CASE(2)
#undef ES_BF16_CASE
	default: es_bf16_tile(1, a, lda, b, K2, drow, m0, m1); break;
	}
}

// es_bf16_fma_tile is es_bf16_tile in float32 FMAs (es_bf16_fma: Intel's cores,
// whose VDPBF16PS does half the arithmetic of their FMAs in the same time; on an
// Emerald Rapids core 83 against 172 GFLOP/s). Per pair of K values the panel's two
// vectors are widened to four (a BF16 value is a float32's upper half: the even K
// value shifted up, the odd one masked), and each row's two values of A, rounded to
// BF16 as for es_bf16_tile and widened, are broadcast from af: A's block of
// ES_BF16_MR rows K-major (af[k][r]), so that every row is one constant offset
// from one pointer. The products are exact in float32, as the dot products' are.
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline void
es_bf16_fma_tile(const int mr, const float *af, const uint16_t *b, int64_t K2, float *const *drow, __mmask16 m0,
                 __mmask16 m1) {
	__m512 acc[ES_BF16_MR][2];
	for (int r = 0; r < mr; r++) {
		acc[r][0] = _mm512_setzero_ps();
		acc[r][1] = _mm512_setzero_ps();
	}
	const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
	for (int64_t kp = 0; kp < K2; kp++) {
		__m512i p0 = _mm512_load_si512(b + kp * 64), p1 = _mm512_load_si512(b + kp * 64 + 32);
		__m512 b0e = _mm512_castsi512_ps(_mm512_slli_epi32(p0, 16));
		__m512 b0o = _mm512_castsi512_ps(_mm512_and_si512(p0, hi));
		__m512 b1e = _mm512_castsi512_ps(_mm512_slli_epi32(p1, 16));
		__m512 b1o = _mm512_castsi512_ps(_mm512_and_si512(p1, hi));
		const float *a = af + kp * 2 * ES_BF16_MR;
		for (int r = 0; r < mr; r++) {
			__m512 ae = _mm512_set1_ps(a[r]), ao = _mm512_set1_ps(a[ES_BF16_MR + r]);
			acc[r][0] = _mm512_fmadd_ps(ao, b0o, _mm512_fmadd_ps(ae, b0e, acc[r][0]));
			acc[r][1] = _mm512_fmadd_ps(ao, b1o, _mm512_fmadd_ps(ae, b1e, acc[r][1]));
		}
	}
	for (int r = 0; r < mr; r++) {
		_mm512_mask_storeu_ps(drow[r], m0, acc[r][0]);
		_mm512_mask_storeu_ps(drow[r] + 16, m1, acc[r][1]);
	}
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
es_bf16_fma_rows(int mr, const float *af, const uint16_t *b, int64_t K2, float *const *drow, __mmask16 m0, __mmask16 m1) {
	switch (mr) {
#define ES_BF16_CASE(R) \
	case R: es_bf16_fma_tile(R, af, b, K2, drow, m0, m1); break;
	ES_BF16_CASE(12) ES_BF16_CASE(11) ES_BF16_CASE(10) ES_BF16_CASE(9) ES_BF16_CASE(8) ES_BF16_CASE(7)
	ES_BF16_CASE(6) ES_BF16_CASE(5) ES_BF16_CASE(4) ES_BF16_CASE(3) ES_BF16_CASE(2)
#undef ES_BF16_CASE
	default: es_bf16_fma_tile(1, af, b, K2, drow, m0, m1); break;
	}
}

// es_bf16_convert writes n floats (n even) as n/2 pairs of BF16, rounding to
// nearest even as ggml's conversion does.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
es_bf16_convert(uint32_t *dst, const float *x, int64_t n) {
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
		_mm512_storeu_si512(dst + i / 2, (__m512i)v);
	}
	if (i < n) {
		__mmask16 lo = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__mmask16 hi = n - i > 16 ? (__mmask16)((1u << (n - i - 16)) - 1) : 0;
		__m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + i + 16), _mm512_maskz_loadu_ps(lo, x + i));
		_mm512_mask_storeu_epi32(dst + i / 2, (__mmask16)((1u << ((n - i) / 2)) - 1), (__m512i)v);
	}
}

// Products with BF16 weight matrices on AVX2
//
// A CPU without AVX-512 (every AMD before Zen 4, Intel's client cores since Alder
// Lake, older Xeons) multiplies the same panels in 256-bit FMAs: es_bf16_fma_tile's
// arithmetic, the panel in two halves of 16 columns, ES_BF16_MR256 rows at a time
// (4 rows by 2 vectors of accumulators and the 4 vectors of a half's K pair widened
// fill 12 of AVX2's 16 registers). Each output is the same sum in the same order as
// es_bf16_fma_tile's (per K pair the even value's product, then the odd one's), so
// the vectors are those of the AVX-512 kernels' FMA form bit for bit.
#define ES_BF16_MR256 4

// es_bf16_round writes the BF16 bits of 8 floats in the upper halves of their lanes:
// rounded to nearest even, input denormals read as zero and NaN kept quiet, as
// VCVTNE2PS2BF16 rounds them (es_bf16_convert).
__attribute__((target("avx2,fma"), always_inline)) static inline __m256i es_bf16_round(__m256 x) {
	__m256i u = _mm256_castps_si256(x);
	const __m256i exp = _mm256_set1_epi32(0x7F800000), sign = _mm256_set1_epi32((int)0x80000000u);
	__m256i denormal = _mm256_cmpeq_epi32(_mm256_and_si256(u, exp), _mm256_setzero_si256());
	u = _mm256_blendv_epi8(u, _mm256_and_si256(u, sign), denormal);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
	__m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
	r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
	return _mm256_and_si256(r, _mm256_set1_epi32((int)0xFFFF0000u));
}

// es_bf16_convert256 is es_bf16_convert in AVX2: n floats (n even) as n/2 pairs.
__attribute__((target("avx2,fma"))) static void es_bf16_convert256(uint32_t *dst, const float *x, int64_t n) {
	// the upper halves of lanes 2i and 2i + 1 into one 32-bit pair: bytes 2, 3, 6, 7,
	// ... of each 128-bit lane, then the two lanes' low quadwords together
	const __m256i pick = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10,
	                                      11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i v = _mm256_shuffle_epi8(es_bf16_round(_mm256_loadu_ps(x + i)), pick);
		_mm_storeu_si128((__m128i *)(dst + i / 2), _mm256_castsi256_si128(_mm256_permute4x64_epi64(v, 0x08)));
	}
	if (i < n) {
		float tail[8] __attribute__((aligned(32))) = {0};
		uint32_t out[4];
		memcpy(tail, x + i, (size_t)(n - i) * sizeof(float));
		__m256i v = _mm256_shuffle_epi8(es_bf16_round(_mm256_load_ps(tail)), pick);
		_mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(_mm256_permute4x64_epi64(v, 0x08)));
		memcpy(dst + i / 2, out, (size_t)(n - i) / 2 * sizeof(uint32_t));
	}
}

// es_bf16_fma256_tile computes rows r < mr (a constant where inlined) of the 16
// columns of half h of a panel, width of the panel's columns valid; af is A's block
// of ES_BF16_MR rows K-major (es_bf16_fma_tile's), from its first row here.
__attribute__((target("avx2,fma"), always_inline)) static inline void
es_bf16_fma256_tile(const int mr, const float *af, const uint16_t *b, int64_t K2, float *const *drow, int h,
                    int64_t width) {
	__m256 acc[ES_BF16_MR256][2];
	for (int r = 0; r < mr; r++) {
		acc[r][0] = _mm256_setzero_ps();
		acc[r][1] = _mm256_setzero_ps();
	}
	const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
	const uint32_t *bp = (const uint32_t *)b + h * 16;
	for (int64_t kp = 0; kp < K2; kp++) {
		__m256i p0 = _mm256_load_si256((const __m256i *)(bp + kp * ES_PANEL));
		__m256i p1 = _mm256_load_si256((const __m256i *)(bp + kp * ES_PANEL + 8));
		__m256 b0e = _mm256_castsi256_ps(_mm256_slli_epi32(p0, 16));
		__m256 b0o = _mm256_castsi256_ps(_mm256_and_si256(p0, hi));
		__m256 b1e = _mm256_castsi256_ps(_mm256_slli_epi32(p1, 16));
		__m256 b1o = _mm256_castsi256_ps(_mm256_and_si256(p1, hi));
		const float *a = af + kp * 2 * ES_BF16_MR;
		for (int r = 0; r < mr; r++) {
			__m256 ae = _mm256_broadcast_ss(a + r), ao = _mm256_broadcast_ss(a + ES_BF16_MR + r);
			acc[r][0] = _mm256_fmadd_ps(ao, b0o, _mm256_fmadd_ps(ae, b0e, acc[r][0]));
			acc[r][1] = _mm256_fmadd_ps(ao, b1o, _mm256_fmadd_ps(ae, b1e, acc[r][1]));
		}
	}
	int64_t valid = width - h * 16;
	for (int r = 0; r < mr; r++) {
		float *d = drow[r] + h * 16;
		if (valid >= 16) {
			_mm256_storeu_ps(d, acc[r][0]);
			_mm256_storeu_ps(d + 8, acc[r][1]);
		} else {
			float tmp[16] __attribute__((aligned(32)));
			_mm256_store_ps(tmp, acc[r][0]);
			_mm256_store_ps(tmp + 8, acc[r][1]);
			memcpy(d, tmp, (size_t)valid * sizeof(float));
		}
	}
}

// es_bf16_fma256_rows computes mr <= ES_BF16_MR rows of a panel's width columns from
// A's block af (es_bf16_fma_rows's arguments, the columns' count for its masks).
__attribute__((target("avx2,fma"))) static void es_bf16_fma256_rows(int mr, const float *af, const uint16_t *b,
                                                                      int64_t K2, float *const *drow, int64_t width) {
	for (int r0 = 0; r0 < mr; r0 += ES_BF16_MR256) {
		int n = mr - r0 < ES_BF16_MR256 ? mr - r0 : ES_BF16_MR256;
		for (int h = 0; h * 16 < width; h++) {
			switch (n) {
			case 4: es_bf16_fma256_tile(4, af + r0, b, K2, drow + r0, h, width); break;
			case 3: es_bf16_fma256_tile(3, af + r0, b, K2, drow + r0, h, width); break;
			case 2: es_bf16_fma256_tile(2, af + r0, b, K2, drow + r0, h, width); break;
			default: es_bf16_fma256_tile(1, af + r0, b, K2, drow + r0, h, width); break;
			}
		}
	}
}
#endif

static void es_bf16_convert_task(void *arg, int task, int thread) {
	(void)thread;
	const struct es_bmm *mm = arg;
	const struct ggml_tensor *x = mm->x;
	int64_t r0 = task * mm->rows_per_task;
	int64_t r1 = r0 + mm->rows_per_task < mm->M ? r0 + mm->rows_per_task : mm->M;
	for (int64_t r = r0; r < r1; r++) {
		int64_t i1 = r % x->ne[1], i2 = (r / x->ne[1]) % x->ne[2], i3 = r / (x->ne[1] * x->ne[2]);
		const float *row = (const float *)((const char *)x->data + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]);
#if ES_ACCEL_X86
		if (es_bf16_dot) {
			es_bf16_convert(mm->a + r * (mm->K / 2), row, mm->K);
		} else {
			es_bf16_convert256(mm->a + r * (mm->K / 2), row, mm->K);
		}
		if (mm->af != NULL) {
			// rounded as for the dot products, then widened into the row's block
			const uint32_t *pairs = mm->a + r * (mm->K / 2);
			float *blk = mm->af + (r / ES_BF16_MR) * mm->K * ES_BF16_MR + r % ES_BF16_MR;
			for (int64_t kp = 0; kp < mm->K / 2; kp++) {
				uint32_t lo = pairs[kp] << 16, hi = pairs[kp] & 0xFFFF0000u;
				memcpy(blk + (2 * kp) * ES_BF16_MR, &lo, sizeof(float));
				memcpy(blk + (2 * kp + 1) * ES_BF16_MR, &hi, sizeof(float));
			}
		}
#else
		(void)row; // never registered without the x86 kernels
#endif
	}
}

// ---------------------------------------------------------------------------
// Products with BF16 weight matrices, through AMX tiles
//
// Intel's CPUs from Sapphire Rapids on multiply BF16 in AMX tiles: one TDPBF16PS
// takes a tile of 16 rows by 32 BF16 values of A and one of 32 values by 16
// columns of B, two K values interleaved per column (the panels' layout, so a
// panel's 16 pair rows of 16 columns are a tile at a stride of 128 bytes), and
// adds the 16 x 16 products into float32, 16 times the arithmetic of a vector FMA
// per instruction. es_amx_panel computes a panel's 32 columns for every row of A
// in blocks of 32 rows: four C tiles (0..3), two of A (4, 5), two of B (6, 7),
// four loads for four products per 32 K values. The products of BF16 values are
// exact in float32 and summed in float32, as the dot products' are.
//
// The tiles' configuration belongs to the thread: a task saves the one it finds
// (ggml's own AMX kernels, in the sapphirerapids variant, configure their tiles
// once per thread and never again) and restores it when done. Linux hands a process
// the tiles' 8 KiB of state only when asked (arch_prctl ARCH_REQ_XCOMP_PERM), which
// es_amx_detect does once.

// Every product of a matrix whose K is a multiple of 32 goes to the tiles, however
// few its rows: a token's vector must not depend on the tokens it shares a call with
// (the conformance suite holds a text's vector bit for bit alone, packed and beside
// other requests), and the tiles sum a row's products in another order than the
// FMAs do.
//
// es_bf16_amx: 0 no tiles, 1 tiles (the default where es_amx_usable).
// es_accel_set_bf16_amx forces it; EMBED_STACK_AMX=off turns the default off.
static atomic_int es_bf16_amx;
static int es_bf16_amx_forced = -1;
// Whether this CPU has AMX-TILE and AMX-BF16, the OS enables their state (XCR0
// bits 17 and 18) and granted it to this process.
static bool es_amx_usable;

#if ES_ACCEL_X86
#define ES_ARCH_REQ_XCOMP_PERM 0x1023
#define ES_XFEATURE_XTILEDATA 18

static bool es_amx_detect(void) {
	unsigned a, b, c, d;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) {
		return false; // AMX-BF16 (bit 22), AMX-TILE (bit 24)
	}
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) {
		return false; // OSXSAVE: XGETBV
	}
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	if ((lo & (3u << 17)) != (3u << 17)) {
		return false; // XTILECFG, XTILEDATA
	}
#if defined(__linux__)
	return syscall(SYS_arch_prctl, ES_ARCH_REQ_XCOMP_PERM, ES_XFEATURE_XTILEDATA) == 0;
#else
	return false;
#endif
}

// The layout LDTILECFG reads (palette 1): bytes per row and rows of each tile.
struct es_amx_cfg {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};
_Static_assert(sizeof(struct es_amx_cfg) == 64, "a tile configuration is 64 bytes");

#define ES_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))

// es_amx_configure sets the tiles for a block of r0 + r1 rows of A (r0 <= 16, r1 <=
// 16; r1 0: tiles 2, 3 and 5 unused).
ES_AMX_TARGET static void es_amx_configure(int r0, int r1) {
	struct es_amx_cfg cfg __attribute__((aligned(64)));
	memset(&cfg, 0, sizeof cfg);
	cfg.palette = 1;
	static const int c_rows_of[8] = {0, 0, 1, 1, 0, 1, -1, -1}; // 0: r0, 1: r1, -1: 16 (B)
	for (int t = 0; t < 8; t++) {
		int rows = c_rows_of[t] < 0 ? 16 : c_rows_of[t] == 0 ? r0 : r1;
		cfg.rows[t] = (uint8_t)rows;
		cfg.colsb[t] = rows > 0 ? 64 : 0;
	}
	_tile_loadconfig(&cfg);
}

ES_AMX_TARGET static void es_amx_save(struct es_amx_cfg *saved) {
	_tile_storeconfig(saved);
}

ES_AMX_TARGET static void es_amx_restore(const struct es_amx_cfg *saved) {
	if (saved->palette != 0) {
		_tile_loadconfig(saved);
	} else {
		_tile_release();
	}
}

// es_amx_out writes the rows x cols (cols <= 16) floats of a C tile stored in c
// (16 a row) to d's rows, d_row bytes apart.
static void es_amx_out(const float *c, int rows, int cols, char *d, size_t d_row) {
	for (int r = 0; r < rows; r++) {
		memcpy(d + (size_t)r * d_row, c + r * 16, (size_t)cols * sizeof(float));
	}
}

// es_amx_panel computes the panel b's width columns (n0..) for the M rows of A (a,
// K2 pairs a row; K2 a multiple of 16) into d's rows (d_row bytes apart). *cfg is
// the configuration loaded on this thread (r0 * 32 + r1, -1 none of these).
ES_AMX_TARGET static void es_amx_panel(const uint32_t *a, int64_t M, int64_t K2, const uint16_t *b, char *d,
                                       size_t d_row, int64_t n0, int64_t width, int *cfg) {
	float c[256] __attribute__((aligned(64)));
	const size_t lda = (size_t)K2 * sizeof(uint32_t);
	for (int64_t m = 0; m < M; m += 32) {
		int r0 = M - m >= 16 ? 16 : (int)(M - m);
		int r1 = M - m - r0 >= 16 ? 16 : (int)(M - m - r0);
		if (*cfg != r0 * 32 + r1) {
			es_amx_configure(r0, r1);
			*cfg = r0 * 32 + r1;
		}
		const uint32_t *a0 = a + m * K2, *a1 = a0 + 16 * K2;
		_tile_zero(0);
		_tile_zero(1);
		if (r1 > 0) {
			_tile_zero(2);
			_tile_zero(3);
			for (int64_t kp = 0; kp < K2; kp += 16) {
				_tile_loadd(6, b + kp * 64, 128);
				_tile_loadd(7, b + kp * 64 + 32, 128);
				_tile_loadd(4, a0 + kp, lda);
				_tile_loadd(5, a1 + kp, lda);
				_tile_dpbf16ps(0, 4, 6);
				_tile_dpbf16ps(1, 4, 7);
				_tile_dpbf16ps(2, 5, 6);
				_tile_dpbf16ps(3, 5, 7);
			}
		} else {
			for (int64_t kp = 0; kp < K2; kp += 16) {
				_tile_loadd(6, b + kp * 64, 128);
				_tile_loadd(7, b + kp * 64 + 32, 128);
				_tile_loadd(4, a0 + kp, lda);
				_tile_dpbf16ps(0, 4, 6);
				_tile_dpbf16ps(1, 4, 7);
			}
		}
		char *d0 = d + (size_t)m * d_row + (size_t)n0 * sizeof(float);
		char *d1 = d0 + 16 * d_row;
		int w1 = width > 16 ? (int)width - 16 : 0;
		if (width >= 16) {
			_tile_stored(0, d0, d_row);
		} else {
			_tile_stored(0, c, 64);
			es_amx_out(c, r0, (int)width, d0, d_row);
		}
		if (w1 == 16) {
			_tile_stored(1, d0 + 64, d_row);
		} else if (w1 > 0) {
			_tile_stored(1, c, 64);
			es_amx_out(c, r0, w1, d0 + 64, d_row);
		}
		if (r1 > 0) {
			if (width >= 16) {
				_tile_stored(2, d1, d_row);
			} else {
				_tile_stored(2, c, 64);
				es_amx_out(c, r1, (int)width, d1, d_row);
			}
			if (w1 == 16) {
				_tile_stored(3, d1 + 64, d_row);
			} else if (w1 > 0) {
				_tile_stored(3, c, 64);
				es_amx_out(c, r1, w1, d1 + 64, d_row);
			}
		}
	}
}
#endif

static void es_bf16_task(void *arg, int task, int thread) {
	const struct es_bmm *mm = arg;
	int64_t n_panels = (mm->N + ES_PANEL - 1) / ES_PANEL;
	int64_t p0 = task * mm->panels_per_task;
	int64_t p1 = p0 + mm->panels_per_task < n_panels ? p0 + mm->panels_per_task : n_panels;
	int64_t K2 = mm->K / 2;
#if ES_ACCEL_X86
	struct es_amx_cfg saved __attribute__((aligned(64)));
	int cfg = -1;
	if (mm->amx) {
		es_amx_save(&saved);
	}
#endif
	for (int64_t p = p0; p < p1; p++) {
		int64_t n0 = p * ES_PANEL;
		int64_t width = mm->N - n0 < ES_PANEL ? mm->N - n0 : ES_PANEL;
		const uint16_t *b;
		if (mm->panels != NULL) {
			b = mm->panels + p * mm->K * ES_PANEL;
		} else {
			// float units of scratch: one panel of K*32 BF16 values is K*16 floats
			uint16_t *buf = (uint16_t *)es_scratch_get(&mm->scratch[thread], (size_t)(mm->K * ES_PANEL / 2));
			mm->scratch[thread].packed_b = NULL;
			const char *rows = (const char *)mm->w->data + (size_t)n0 * mm->w->nb[1];
			if (mm->w->type == GGML_TYPE_Q8_0) {
#if ES_ACCEL_X86
				es_q8_pack(buf, rows, mm->w->nb[1], mm->K, width);
#endif
			} else {
				es_bf16_pack(buf, rows, mm->w->nb[1], mm->K, width);
			}
			b = buf;
		}
#if ES_ACCEL_X86
		if (mm->amx) {
			es_amx_panel(mm->a, mm->M, K2, b, mm->d, mm->d_row, n0, width, &cfg);
			continue;
		}
#endif
		// the column masks of a narrower last panel (__mmask16's bits; a plain
		// integer here, as this loop is compiled for every architecture)
		uint16_t m0 = width >= 16 ? 0xffff : (uint16_t)((1u << width) - 1);
		uint16_t m1 = width >= 32 ? 0xffff : width > 16 ? (uint16_t)((1u << (width - 16)) - 1) : 0;
		for (int64_t m = 0; m < mm->M; m += ES_BF16_MR) {
			int mr = (int)(mm->M - m < ES_BF16_MR ? mm->M - m : ES_BF16_MR);
			float *drow[ES_BF16_MR];
			for (int r = 0; r < mr; r++) {
				drow[r] = (float *)(mm->d + (size_t)(m + r) * mm->d_row) + n0;
			}
#if ES_ACCEL_X86
			if (mm->avx2) {
				es_bf16_fma256_rows(mr, mm->af + (m / ES_BF16_MR) * mm->K * ES_BF16_MR, b, K2, drow, width);
			} else if (mm->af != NULL) {
				es_bf16_fma_rows(mr, mm->af + (m / ES_BF16_MR) * mm->K * ES_BF16_MR, b, K2, drow, m0, m1);
			} else {
				es_bf16_rows(mr, mm->a + m * K2, K2, b, K2, drow, m0, m1);
			}
#else
			(void)drow; // never registered without the x86 kernels
			(void)b;
			(void)K2;
			(void)m0;
			(void)m1;
#endif
		}
	}
#if ES_ACCEL_X86
	if (mm->amx) {
		es_amx_restore(&saved);
	}
#endif
}

// es_bf16_mul_mat computes dst = w x for a BF16 or Q8_0 matrix w: x converted to
// BF16 pairs once (as ggml's CPU backend converts it), then each thread a group of
// panels (a Q8_0 matrix's converted as they are needed, es_q8_pack).
static void es_bf16_mul_mat(struct es_pool *pool, struct es_scratch *scratch, uint32_t **abuf, size_t *acap,
                            struct ggml_tensor *dst) {
	const struct ggml_tensor *w = dst->src[0], *x = dst->src[1];
	struct es_bmm mm = {
		.x = x,
		.d = dst->data,
		.d_row = dst->nb[1],
		.M = x->ne[1] * x->ne[2] * x->ne[3],
		.K = w->ne[0],
		.N = w->ne[1],
		.w = w,
		.scratch = scratch,
		.panels = w->extra == &es_bf16_packed_mark ? (const uint16_t *)w->data : NULL,
	};
	if (mm.M == 0) {
		// a decoder's last layer when no token of the call is an output
		return;
	}
	// x's BF16 pairs, and with es_bf16_fma after them its widened blocks (whole
	// blocks of ES_BF16_MR rows, 4 bytes a value as the pairs'), 64-byte aligned
	// AMX tiles take K in blocks of 32 values; without them, es_bf16_fma's choice
	int amx = atomic_load_explicit(&es_bf16_amx, memory_order_relaxed);
	mm.avx2 = es_accel_isa == ES_ISA_AVX2;
	mm.amx = !mm.avx2 && amx != 0 && mm.K % 32 == 0;
	bool fma = mm.avx2 || !es_bf16_dot || (!mm.amx && atomic_load_explicit(&es_bf16_fma, memory_order_relaxed));
	size_t pairs = (size_t)(mm.M * (mm.K / 2)), at = (pairs + 15) / 16 * 16;
	size_t need = fma ? at + (size_t)((mm.M + ES_BF16_MR - 1) / ES_BF16_MR * ES_BF16_MR * mm.K) : pairs;
	if (*acap < need) {
		free(*abuf);
		*abuf = aligned_alloc(64, (need * sizeof(uint32_t) + 63) / 64 * 64);
		*acap = need;
	}
	mm.a = *abuf;
	mm.af = fma ? (float *)(*abuf + at) : NULL;
	int64_t tasks = 4 * (int64_t)pool->n_threads;
	mm.rows_per_task = (mm.M + tasks - 1) / tasks;
	es_pool_run(pool, (int)((mm.M + mm.rows_per_task - 1) / mm.rows_per_task), es_bf16_convert_task, &mm);
	int64_t n_panels = (mm.N + ES_PANEL - 1) / ES_PANEL;
	mm.panels_per_task = (n_panels + tasks - 1) / tasks;
	if (mm.panels_per_task < 1) {
		mm.panels_per_task = 1;
	}
	es_pool_run(pool, (int)((n_panels + mm.panels_per_task - 1) / mm.panels_per_task), es_bf16_task, &mm);
}

// ---------------------------------------------------------------------------
// Flash attention over a BF16 KV cache: a decoder's long sequences
//
// Without flash attention llama.cpp multiplies a long sequence's attention out:
// scores of cells x tokens x heads in f32 per layer, written by ggml's F16
// matrix kernels, read and written again by its softmax, converted to F16 and
// read once more by the product with V. On a 4096-token input (0.6B shape, Zen 5)
// that was two thirds of the time, and it grows with the length. ggml's own flash
// attention does not help on the CPU: it walks one query at a time with one dot
// product per cell. This kernel computes the same operation (GGML_OP_FLASH_ATTN_EXT)
// in tiles of 32 queries by 32 cells: the scores of a tile with AVX512_BF16's dot
// products from a BF16 K cache, softmax online in f32 (lanes are queries, so a
// query's maximum and sum need no horizontal reduction), and the product with a
// BF16 V cache again with dot products, never leaving a tile's 4 KiB of scores.
// A tile whose cells the mask hides from every one of its queries is skipped, so
// a causal sequence costs half of its square.
//
// What a query's output is: blocks of cells from cell 0 in steps of 32, each
// folded into the running maximum, sum and output in order; a block hidden from
// the query changes none of them, bit for bit (its probabilities are exactly 0
// and its rescale factor exactly 1), so the output is a function of the query,
// the cells it sees and their positions, whatever shares its tile or call.
// Probabilities enter the product with V as two BF16 values each, the rounded one
// and what rounding left (16 of f32's 24 bits): with one, outputs moved by up to
// 1e-3 of V's scale; with both, by 1e-6 as ggml's kernel does (f32
// probabilities), for a third more dot products.

#if ES_ACCEL_X86
// es_exp_poly512 is exp(x) as 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], p a
// degree-6 polynomial (relative error about 2e-7), for x where 2^n is a normal
// float; GELU's tanh and flash attention's softmax use it.
__attribute__((target("avx512f"))) static inline __m512 es_exp_poly512(__m512 x) {
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
	                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
	__m512 p = _mm512_set1_ps(1.0f / 720.0f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}
#endif

#define ES_FA_Q 32  // queries per tile: two vectors of lanes
#define ES_FA_KV 32 // cells per block
#define ES_FA_MAXD 256

// What the mask does to the block of a tile (es_fa_classify_task): every head of a
// call shares one mask, so each tile's blocks are classified once per call.
enum { ES_FA_SEEN = 0, ES_FA_HIDDEN = 1, ES_FA_MIXED = 2 };

struct es_fa {
	const struct ggml_tensor *q, *k, *v, *mask;
	struct ggml_tensor *dst;
	float scale;
	int64_t D, DV, n_q, n_kv, n_head, n_head_kv;
	int64_t q_tiles;  // tiles per head
	int64_t kv_blocks;
	uint8_t *blocks;  // [mask head][q tile][kv block]: ES_FA_*; NULL without a mask
	struct es_scratch *scratch;
	// exact: a query's output does not depend on where its cells lie in the cache
	// (es_fa_tile_fma's two passes), for a context that packs sequences.
	bool exact;
};

#if ES_ACCEL_X86
#define ES_FA_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,f16c")))

// es_exp512 is exp for x <= 0 (es_exp_poly512; TestAccelFlashAttention holds the
// kernel to float64 within 2.2e-6), exactly 0 below -87 (where f32's normal range
// ends) and at -inf, and exactly 1 at 0: the values that make a hidden cell change
// nothing.
ES_FA_TARGET static inline __m512 es_exp512(__m512 x) {
	__mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
	return _mm512_maskz_mov_ps(live, es_exp_poly512(x));
}

// es_fa_scores computes rows r < mr of a block's scores: s[r][i] = K[r] . Q[i] for
// the tile's 32 queries (two vectors), K's rows read in place as BF16 pairs, Q
// packed as qp[kp][32] pairs.
ES_FA_TARGET __attribute__((always_inline)) static inline void
es_fa_scores_rows(const int mr, const char *k0, size_t k_row, const uint32_t *qp, int64_t D2, float *s) {
	__m512 acc[8][2];
	for (int r = 0; r < mr; r++) {
		acc[r][0] = _mm512_setzero_ps();
		acc[r][1] = _mm512_setzero_ps();
	}
	for (int64_t kp = 0; kp < D2; kp++) {
		__m512bh q0 = (__m512bh)_mm512_load_si512(qp + kp * ES_FA_Q);
		__m512bh q1 = (__m512bh)_mm512_load_si512(qp + kp * ES_FA_Q + 16);
		for (int r = 0; r < mr; r++) {
			__m512bh kv = (__m512bh)_mm512_set1_epi32((int)((const uint32_t *)(k0 + r * k_row))[kp]);
			acc[r][0] = _mm512_dpbf16_ps(acc[r][0], kv, q0);
			acc[r][1] = _mm512_dpbf16_ps(acc[r][1], kv, q1);
		}
	}
	for (int r = 0; r < mr; r++) {
		_mm512_store_ps(s + r * ES_FA_Q, acc[r][0]);
		_mm512_store_ps(s + r * ES_FA_Q + 16, acc[r][1]);
	}
}

ES_FA_TARGET static void es_fa_scores(int mr, const char *k0, size_t k_row, const uint32_t *qp, int64_t D2, float *s) {
	switch (mr) {
#define ES_FA_CASE(R) \
	case R: es_fa_scores_rows(R, k0, k_row, qp, D2, s); break;
	ES_FA_CASE(8) ES_FA_CASE(7) ES_FA_CASE(6) ES_FA_CASE(5) ES_FA_CASE(4) ES_FA_CASE(3) ES_FA_CASE(2)
#undef ES_FA_CASE
	default: es_fa_scores_rows(1, k0, k_row, qp, D2, s); break;
	}
}

// es_fa_pv4x4 computes o[r][c] = o[r][c] * alpha[r] + sum over the block's 16 cell
// pairs of (pp + pl)[jp][r] . vp[jp][c], for 4 queries r by 64 values c: 16
// accumulators, written out so that they stay in registers.
ES_FA_TARGET static inline void es_fa_pv4x4(float *o, int64_t ldo, const float *alpha, const uint32_t *vp, int64_t ldv,
                                            const uint32_t *pp, const uint32_t *pl) {
#define ES_FA_ROW(R)                                                                             \
	__m512 a##R##0 = _mm512_mul_ps(_mm512_load_ps(o + R * ldo), _mm512_set1_ps(alpha[R]));      \
	__m512 a##R##1 = _mm512_mul_ps(_mm512_load_ps(o + R * ldo + 16), _mm512_set1_ps(alpha[R])); \
	__m512 a##R##2 = _mm512_mul_ps(_mm512_load_ps(o + R * ldo + 32), _mm512_set1_ps(alpha[R])); \
	__m512 a##R##3 = _mm512_mul_ps(_mm512_load_ps(o + R * ldo + 48), _mm512_set1_ps(alpha[R]));
	ES_FA_ROW(0) ES_FA_ROW(1) ES_FA_ROW(2) ES_FA_ROW(3)
#undef ES_FA_ROW
	for (int jp = 0; jp < ES_FA_KV / 2; jp++) {
		const uint32_t *v = vp + jp * ldv;
		__m512bh v0 = (__m512bh)_mm512_load_si512(v), v1 = (__m512bh)_mm512_load_si512(v + 16);
		__m512bh v2 = (__m512bh)_mm512_load_si512(v + 32), v3 = (__m512bh)_mm512_load_si512(v + 48);
#define ES_FA_ROW(R)                                                               \
	{                                                                              \
		__m512bh p = (__m512bh)_mm512_set1_epi32((int)pp[jp * ES_FA_Q + R]);       \
		__m512bh q = (__m512bh)_mm512_set1_epi32((int)pl[jp * ES_FA_Q + R]);       \
		a##R##0 = _mm512_dpbf16_ps(_mm512_dpbf16_ps(a##R##0, p, v0), q, v0);       \
		a##R##1 = _mm512_dpbf16_ps(_mm512_dpbf16_ps(a##R##1, p, v1), q, v1);       \
		a##R##2 = _mm512_dpbf16_ps(_mm512_dpbf16_ps(a##R##2, p, v2), q, v2);       \
		a##R##3 = _mm512_dpbf16_ps(_mm512_dpbf16_ps(a##R##3, p, v3), q, v3);       \
	}
		ES_FA_ROW(0) ES_FA_ROW(1) ES_FA_ROW(2) ES_FA_ROW(3)
#undef ES_FA_ROW
	}
#define ES_FA_ROW(R)                              \
	_mm512_store_ps(o + R * ldo, a##R##0);        \
	_mm512_store_ps(o + R * ldo + 16, a##R##1);   \
	_mm512_store_ps(o + R * ldo + 32, a##R##2);   \
	_mm512_store_ps(o + R * ldo + 48, a##R##3);
	ES_FA_ROW(0) ES_FA_ROW(1) ES_FA_ROW(2) ES_FA_ROW(3)
#undef ES_FA_ROW
}

// es_fa_bases finds a tile's rows: the K and V rows of head h's KV head (batch i3),
// and its mask's rows and block classes (NULL without a mask).
ES_FA_TARGET static void es_fa_bases(const struct es_fa *fa, int64_t h, int64_t i3, int64_t i0, const char **kbase,
                                     const char **vbase, const char **mbase, const uint8_t **blocks) {
	const struct ggml_tensor *k = fa->k, *v = fa->v, *mask = fa->mask;
	const int64_t hk = h / (fa->n_head / fa->n_head_kv);
	*kbase = (const char *)k->data + hk * k->nb[2] + (i3 % k->ne[3]) * k->nb[3];
	*vbase = (const char *)v->data + hk * v->nb[2] + (i3 % v->ne[3]) * v->nb[3];
	*mbase = NULL;
	*blocks = NULL;
	if (mask != NULL) {
		*mbase = (const char *)mask->data + (h % mask->ne[2]) * mask->nb[2] + (i3 % mask->ne[3]) * mask->nb[3];
		*blocks = fa->blocks + ((h % mask->ne[2]) * fa->q_tiles + i0 / ES_FA_Q) * fa->kv_blocks;
	}
}

// es_fa_scale_mask scales a block's w rows of scores s[cell][query] and adds the
// mask mt (where some cell is hidden).
ES_FA_TARGET static void es_fa_scale_mask(float *s, const float *mt, int w, __m512 scale) {
	for (int j = 0; j < w; j++) {
		for (int c = 0; c < 2; c++) {
			__m512 x = _mm512_mul_ps(_mm512_load_ps(s + j * ES_FA_Q + c * 16), scale);
			if (mt != NULL) {
				x = _mm512_add_ps(x, _mm512_load_ps(mt + j * ES_FA_Q + c * 16));
			}
			_mm512_store_ps(s + j * ES_FA_Q + c * 16, x);
		}
	}
}

// es_fa_block_max folds the largest of a block's w rows of scores into m, per query.
ES_FA_TARGET static void es_fa_block_max(const float *s, int w, __m512 m[2]) {
	for (int j = 0; j < w; j++) {
		for (int c = 0; c < 2; c++) {
			m[c] = _mm512_max_ps(m[c], _mm512_load_ps(s + j * ES_FA_Q + c * 16));
		}
	}
}

// es_fa_rescale scales a block's w rows of scores s[cell][query] (and adds the
// mask mt, where some cell is hidden), folds their maximum into the running one m,
// and writes the factor alpha by which the output and the running sum l shrink (l
// already shrunk): the first half of a block's online softmax.
ES_FA_TARGET static void es_fa_rescale(float *s, const float *mt, int w, __m512 scale, __m512 m[2], __m512 l[2],
                                       float *alpha) {
	__m512 bmax[2] = {m[0], m[1]};
	es_fa_scale_mask(s, mt, w, scale);
	es_fa_block_max(s, w, bmax);
	for (int c = 0; c < 2; c++) {
		__m512 a = es_exp512(_mm512_sub_ps(m[c], bmax[c]));
		m[c] = bmax[c];
		l[c] = _mm512_mul_ps(l[c], a);
		_mm512_store_ps(alpha + c * 16, a);
	}
}

// es_fa_mask_block writes the mask over cells j0 .. j0+w-1 of queries i0 ..
// i0+nq-1 transposed to mt[cell][query] as floats, 0 for the tile's missing queries.
ES_FA_TARGET static void es_fa_mask_block(float *mt, const char *mbase, size_t m_row, int64_t i0, int64_t nq, int64_t j0,
                                          int w) {
	memset(mt, 0, sizeof(float) * ES_FA_KV * ES_FA_Q);
	for (int64_t i = 0; i < nq; i++) {
		const uint16_t *mr = (const uint16_t *)(mbase + (i0 + i) * m_row) + j0;
		for (int j = 0; j < w; j++) {
			mt[j * ES_FA_Q + i] = _cvtsh_ss(mr[j]);
		}
	}
}

// es_fa_block gives the class of block j0 of a tile (ES_FA_*), and where the mask
// hides some of its cells from some queries writes the mask over it to mt.
ES_FA_TARGET static int es_fa_block(const uint8_t *blocks, const char *mbase, const struct ggml_tensor *mask, int64_t i0,
                                    int64_t nq, int64_t j0, int w, float *mt) {
	int kind = blocks != NULL ? blocks[j0 / ES_FA_KV] : ES_FA_SEEN;
	if (kind == ES_FA_MIXED) {
		es_fa_mask_block(mt, mbase, mask->nb[1], i0, nq, j0, w);
	}
	return kind;
}

// es_fa_out writes a tile's outputs, o / l (0 for a query that saw no cell).
ES_FA_TARGET static void es_fa_out(const struct es_fa *fa, int64_t h, int64_t i3, int64_t i0, int64_t nq, const float *o,
                                   const __m512 l[2]) {
	const int64_t DV = fa->DV;
	float lsum[ES_FA_Q] __attribute__((aligned(64)));
	_mm512_store_ps(lsum, l[0]);
	_mm512_store_ps(lsum + 16, l[1]);
	for (int64_t i = 0; i < nq; i++) {
		float *out = (float *)((char *)fa->dst->data + h * fa->dst->nb[1] + (i0 + i) * fa->dst->nb[2] + i3 * fa->dst->nb[3]);
		__m512 inv = _mm512_set1_ps(lsum[i] == 0.0f ? 0.0f : 1.0f / lsum[i]);
		for (int64_t d = 0; d < DV; d += 16) {
			_mm512_storeu_ps(out + d, _mm512_mul_ps(_mm512_load_ps(o + i * DV + d), inv));
		}
	}
}

// es_fa_tile computes one tile: queries i0 .. i0+nq-1 of head h (batch i3).
ES_FA_TARGET static void es_fa_tile(const struct es_fa *fa, int64_t h, int64_t i3, int64_t i0, int64_t nq, float *buf) {
	const int64_t D = fa->D, DV = fa->DV, D2 = D / 2;
	const struct ggml_tensor *q = fa->q, *k = fa->k, *v = fa->v, *mask = fa->mask;
	const char *kbase, *vbase, *mbase;
	const uint8_t *blocks;
	es_fa_bases(fa, h, i3, i0, &kbase, &vbase, &mbase, &blocks);
	// scratch, 64-byte aligned pieces
	uint32_t *qp = (uint32_t *)buf;               // [D2][32] pairs
	float *o = buf + D2 * ES_FA_Q;                // [32][DV]
	float *s = o + ES_FA_Q * DV;                  // [32 cells][32 queries]
	float *mt = s + ES_FA_KV * ES_FA_Q;           // the mask, [32 cells][32 queries]
	uint32_t *pp = (uint32_t *)(mt + ES_FA_KV * ES_FA_Q); // [16 cell pairs][32 queries]
	uint32_t *vp = pp + (ES_FA_KV / 2) * ES_FA_Q;         // [16 cell pairs][DV]
	uint32_t *pl = vp + (ES_FA_KV / 2) * DV;              // [16 cell pairs][32 queries]
	float *alpha = (float *)(pl + (ES_FA_KV / 2) * ES_FA_Q); // [32]

	// Q: the tile's rows converted to BF16 pairs (as ggml converts Q to the K
	// cache's type), laid out query-minor; missing queries are zero.
	uint32_t row[ES_FA_MAXD / 2];
	memset(qp, 0, sizeof(uint32_t) * D2 * ES_FA_Q);
	for (int64_t i = 0; i < nq; i++) {
		const float *qr = (const float *)((const char *)q->data + (i0 + i) * q->nb[1] + h * q->nb[2] + i3 * q->nb[3]);
		es_bf16_convert(row, qr, D);
		for (int64_t kp = 0; kp < D2; kp++) {
			qp[kp * ES_FA_Q + i] = row[kp];
		}
	}
	memset(o, 0, sizeof(float) * ES_FA_Q * DV);
	__m512 m[2] = {_mm512_set1_ps(-3.402823466e+38f), _mm512_set1_ps(-3.402823466e+38f)};
	__m512 l[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
	const __m512 scale = _mm512_set1_ps(fa->scale);
	const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
	                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	const __m512i vlo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
	                                     37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
	const __m512i vhi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54, 22,
	                                     53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);

	for (int64_t j0 = 0; j0 < fa->n_kv; j0 += ES_FA_KV) {
		const int w = (int)(fa->n_kv - j0 < ES_FA_KV ? fa->n_kv - j0 : ES_FA_KV);
		// The mask over this block: hidden from every query (skip), from none
		// (add nothing), or neither (add it, transposed to cells x queries).
		int kind = es_fa_block(blocks, mbase, mask, i0, nq, j0, w, mt);
		if (kind == ES_FA_HIDDEN) {
			continue;
		}
		bool any_hidden = kind == ES_FA_MIXED;
		// scores, 8 cells at a time
		for (int j = 0; j < w; j += 8) {
			es_fa_scores(w - j < 8 ? w - j : 8, kbase + (j0 + j) * k->nb[1], k->nb[1], qp, D2, s + j * ES_FA_Q);
		}
		// online softmax, lanes over queries
		es_fa_rescale(s, any_hidden ? mt : NULL, w, scale, m, l, alpha);
		for (int jp = 0; jp < ES_FA_KV / 2; jp++) {
			__m512 p[2][2];
			for (int t = 0; t < 2; t++) {
				int j = 2 * jp + t;
				for (int c = 0; c < 2; c++) {
					p[t][c] = j < w ? es_exp512(_mm512_sub_ps(_mm512_load_ps(s + j * ES_FA_Q + c * 16), m[c]))
					                : _mm512_setzero_ps();
				}
			}
			for (int c = 0; c < 2; c++) {
				// 16 of cell 2jp's then 16 of cell 2jp+1's BF16 values, interleaved
				// into one pair per query
				__m512i both = (__m512i)_mm512_cvtne2ps_pbh(p[1][c], p[0][c]);
				__m512i pair = _mm512_permutexvar_epi16(inter, both);
				_mm512_store_si512(pp + jp * ES_FA_Q + c * 16, pair);
				__m512 r0 = _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16));
				__m512 r1 = _mm512_castsi512_ps(_mm512_and_si512(pair, _mm512_set1_epi32((int)0xFFFF0000u)));
				// and what rounding left, a second BF16 pair per query
				__m512i rest = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(p[1][c], r1), _mm512_sub_ps(p[0][c], r0));
				_mm512_store_si512(pl + jp * ES_FA_Q + c * 16, _mm512_permutexvar_epi16(inter, rest));
				l[c] = _mm512_add_ps(l[c], _mm512_add_ps(p[0][c], p[1][c]));
			}
		}
		// V's rows of this block interleaved into pairs of cells, per value
		for (int jp = 0; jp < ES_FA_KV / 2; jp++) {
			int j = 2 * jp;
			const char *r0 = vbase + (j0 + j) * v->nb[1];
			const char *r1 = vbase + (j0 + j + 1) * v->nb[1];
			int64_t d = 0;
			for (; d + 32 <= DV; d += 32) {
				__m512i a0 = j < w ? _mm512_loadu_si512(r0 + d * 2) : _mm512_setzero_si512();
				__m512i a1 = j + 1 < w ? _mm512_loadu_si512(r1 + d * 2) : _mm512_setzero_si512();
				_mm512_store_si512(vp + jp * DV + d, _mm512_permutex2var_epi16(a0, vlo, a1));
				_mm512_store_si512(vp + jp * DV + d + 16, _mm512_permutex2var_epi16(a0, vhi, a1));
			}
			if (d < DV) { // 16 values left
				__m512i a0 = j < w ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(r0 + d * 2)))
				                   : _mm512_setzero_si512();
				__m512i a1 = j + 1 < w ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(r1 + d * 2)))
				                       : _mm512_setzero_si512();
				_mm512_store_si512(vp + jp * DV + d, _mm512_permutex2var_epi16(a0, vlo, a1));
			}
		}
		// o = o * alpha + p . V, 4 queries by 64 values at a time (then 16)
		for (int64_t i = 0; i < ES_FA_Q; i += 4) {
			int64_t d = 0;
			for (; d + 64 <= DV; d += 64) {
				es_fa_pv4x4(o + i * DV + d, DV, alpha + i, vp + d, DV, pp + i, pl + i);
			}
			for (; d < DV; d += 16) {
				__m512 acc[4];
				for (int r = 0; r < 4; r++) {
					acc[r] = _mm512_mul_ps(_mm512_load_ps(o + (i + r) * DV + d), _mm512_set1_ps(alpha[i + r]));
				}
				for (int jp = 0; jp < ES_FA_KV / 2; jp++) {
					__m512bh vv = (__m512bh)_mm512_load_si512(vp + jp * DV + d);
					for (int r = 0; r < 4; r++) {
						__m512bh pr = (__m512bh)_mm512_set1_epi32((int)pp[jp * ES_FA_Q + i + r]);
						__m512bh pq = (__m512bh)_mm512_set1_epi32((int)pl[jp * ES_FA_Q + i + r]);
						acc[r] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[r], pr, vv), pq, vv);
					}
				}
				for (int r = 0; r < 4; r++) {
					_mm512_store_ps(o + (i + r) * DV + d, acc[r]);
				}
			}
		}
	}
	es_fa_out(fa, h, i3, i0, nq, o, l);
}

// The same tile in float32 FMAs (es_bf16_fma), for the CPUs whose BF16 dot product
// is the slower arithmetic: on an Intel Emerald Rapids core (AMX hidden) VDPBF16PS
// retired one every 2.2 cycles, FMAs two a cycle, so the dot products did 83
// GFLOP/s a core against the FMAs' 172 (a loop of 16 independent accumulators
// each), and this kernel's dot products ran at 40 GFLOP/s a core. Here K's and V's
// blocks are widened to float32 once per tile (exactly: a BF16 value is a
// float32's upper half), Q is rounded to BF16 as in the dot-product kernel, and
// the probabilities stay float32: each output is a float32 sum of exact products,
// within rounding of the other kernel's (whose probabilities are two BF16 halves).
// Blocks are visited and skipped as there, so what a hidden block changes is
// nothing, bit for bit, here too.

// es_fa_fma_scores_rows: s[r][i] = K[r] . Q[i] for rows r < mr of a block, K's rows
// as floats ES_FA_MAXD apart (a constant stride: one pointer for every row), Q as
// qf[d][32].
ES_FA_TARGET __attribute__((always_inline)) static inline void es_fa_fma_scores_rows(const int mr, const float *kf, int64_t D,
                                                                                    const float *qf, float *s) {
	__m512 acc[8][2];
	for (int r = 0; r < mr; r++) {
		acc[r][0] = _mm512_setzero_ps();
		acc[r][1] = _mm512_setzero_ps();
	}
	for (int64_t d = 0; d < D; d++) {
		__m512 q0 = _mm512_load_ps(qf + d * ES_FA_Q), q1 = _mm512_load_ps(qf + d * ES_FA_Q + 16);
		for (int r = 0; r < mr; r++) {
			__m512 kv = _mm512_set1_ps(kf[r * ES_FA_MAXD + d]);
			acc[r][0] = _mm512_fmadd_ps(kv, q0, acc[r][0]);
			acc[r][1] = _mm512_fmadd_ps(kv, q1, acc[r][1]);
		}
	}
	for (int r = 0; r < mr; r++) {
		_mm512_store_ps(s + r * ES_FA_Q, acc[r][0]);
		_mm512_store_ps(s + r * ES_FA_Q + 16, acc[r][1]);
	}
}

ES_FA_TARGET static void es_fa_fma_scores(int mr, const float *kf, int64_t D, const float *qf, float *s) {
	switch (mr) {
#define ES_FA_CASE(R) \
	case R: es_fa_fma_scores_rows(R, kf, D, qf, s); break;
	ES_FA_CASE(8) ES_FA_CASE(7) ES_FA_CASE(6) ES_FA_CASE(5) ES_FA_CASE(4) ES_FA_CASE(3) ES_FA_CASE(2)
#undef ES_FA_CASE
	default: es_fa_fma_scores_rows(1, kf, D, qf, s); break;
	}
}

// es_fa_widen writes n BF16 values as floats, in whole vectors of 16: past n the
// last one holds zeros (its load is masked, so no byte past the row is read).
ES_FA_TARGET static inline void es_fa_widen(float *dst, const uint16_t *src, int64_t n) {
	for (int64_t d = 0; d < n; d += 16) {
		__mmask16 m = n - d >= 16 ? 0xffff : (__mmask16)((1u << (n - d)) - 1);
		__m512i x = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + d));
		_mm512_store_ps(dst + d, _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)));
	}
}

// es_fa_fma_pv computes o[r][c] = o[r][c] * alpha[r] + sum over the block's w cells
// of p[j][r] vf[j][c] for 4 queries r by 16 * NV values c.
#define ES_FA_FMA_PV(NV)                                                                                          \
	ES_FA_TARGET static inline void es_fa_fma_pv##NV(float *o, int64_t ldo, const float *alpha, const float *vf,     \
	                                                 int64_t ldv, const float *p, int w) {                          \
		__m512 acc[4][NV];                                                                                      \
		for (int r = 0; r < 4; r++) {                                                                           \
			for (int c = 0; c < NV; c++) {                                                                      \
				acc[r][c] = _mm512_mul_ps(_mm512_load_ps(o + r * ldo + c * 16), _mm512_set1_ps(alpha[r]));       \
			}                                                                                                   \
		}                                                                                                       \
		for (int j = 0; j < w; j++) {                                                                           \
			__m512 v[NV];                                                                                       \
			for (int c = 0; c < NV; c++) {                                                                      \
				v[c] = _mm512_load_ps(vf + j * ldv + c * 16);                                                   \
			}                                                                                                   \
			for (int r = 0; r < 4; r++) {                                                                       \
				__m512 pr = _mm512_set1_ps(p[j * ES_FA_Q + r]);                                                 \
				for (int c = 0; c < NV; c++) {                                                                  \
					acc[r][c] = _mm512_fmadd_ps(pr, v[c], acc[r][c]);                                           \
				}                                                                                               \
			}                                                                                                   \
		}                                                                                                       \
		for (int r = 0; r < 4; r++) {                                                                           \
			for (int c = 0; c < NV; c++) {                                                                      \
				_mm512_store_ps(o + r * ldo + c * 16, acc[r][c]);                                               \
			}                                                                                                   \
		}                                                                                                       \
	}
ES_FA_FMA_PV(4)
ES_FA_FMA_PV(1)
#undef ES_FA_FMA_PV

// es_fa_tile_fma computes a tile in float32 FMAs. With exact set it takes two
// passes: the first finds each query's largest score over every block it sees,
// and the second adds up the probabilities against that maximum, cell by cell in
// the cache's order, never rescaling. The online softmax's running maximum (one
// pass) depends on which of a query's cells share a block, that is on where its
// sequence starts in the cache, and so did the output's roundings: packed with
// others, a sequence's vector moved by up to 3e-3 from itself alone. In two passes
// a query's every probability is the same whatever its offset, the hidden cells
// add exact zeros, and its output is the same bits; the scores cost twice.
ES_FA_TARGET static void es_fa_tile_fma(const struct es_fa *fa, int64_t h, int64_t i3, int64_t i0, int64_t nq,
                                        float *buf, bool exact) {
	const int64_t D = fa->D, DV = fa->DV;
	const struct ggml_tensor *q = fa->q, *k = fa->k, *v = fa->v, *mask = fa->mask;
	const char *kbase, *vbase, *mbase;
	const uint8_t *blocks;
	es_fa_bases(fa, h, i3, i0, &kbase, &vbase, &mbase, &blocks);
	// scratch, 64-byte aligned pieces (es_fa_scratch_floats)
	float *qf = buf;                                // [D][32]
	float *o = qf + D * ES_FA_Q;                    // [32][DV]
	float *s = o + ES_FA_Q * DV;                    // [32 cells][32 queries]: scores, then probabilities
	float *mt = s + ES_FA_KV * ES_FA_Q;             // the mask, [32 cells][32 queries]
	float *kf = mt + ES_FA_KV * ES_FA_Q;            // [32 cells][ES_FA_MAXD]
	float *vf = kf + ES_FA_KV * ES_FA_MAXD;         // [32 cells][DV]
	float *alpha = vf + ES_FA_KV * DV;              // [32]

	uint32_t row[ES_FA_MAXD / 2];
	memset(qf, 0, sizeof(float) * D * ES_FA_Q);
	for (int64_t i = 0; i < nq; i++) {
		const float *qr = (const float *)((const char *)q->data + (i0 + i) * q->nb[1] + h * q->nb[2] + i3 * q->nb[3]);
		es_bf16_convert(row, qr, D);
		for (int64_t kp = 0; kp < D / 2; kp++) {
			uint32_t lo = row[kp] << 16, hi = row[kp] & 0xFFFF0000u;
			memcpy(qf + (2 * kp) * ES_FA_Q + i, &lo, sizeof(float));
			memcpy(qf + (2 * kp + 1) * ES_FA_Q + i, &hi, sizeof(float));
		}
	}
	memset(o, 0, sizeof(float) * ES_FA_Q * DV);
	__m512 m[2] = {_mm512_set1_ps(-3.402823466e+38f), _mm512_set1_ps(-3.402823466e+38f)};
	__m512 l[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
	const __m512 scale = _mm512_set1_ps(fa->scale);

	if (exact) {
		// the first pass: each query's maximum
		for (int64_t j0 = 0; j0 < fa->n_kv; j0 += ES_FA_KV) {
			const int w = (int)(fa->n_kv - j0 < ES_FA_KV ? fa->n_kv - j0 : ES_FA_KV);
			int kind = es_fa_block(blocks, mbase, mask, i0, nq, j0, w, mt);
			if (kind == ES_FA_HIDDEN) {
				continue;
			}
			for (int j = 0; j < w; j++) {
				es_fa_widen(kf + j * ES_FA_MAXD, (const uint16_t *)(kbase + (j0 + j) * k->nb[1]), D);
			}
			for (int j = 0; j < w; j += 8) {
				es_fa_fma_scores(w - j < 8 ? w - j : 8, kf + j * ES_FA_MAXD, D, qf, s + j * ES_FA_Q);
			}
			es_fa_scale_mask(s, kind == ES_FA_MIXED ? mt : NULL, w, scale);
			es_fa_block_max(s, w, m);
		}
		for (int i = 0; i < ES_FA_Q; i++) {
			alpha[i] = 1.0f;
		}
	}

	for (int64_t j0 = 0; j0 < fa->n_kv; j0 += ES_FA_KV) {
		const int w = (int)(fa->n_kv - j0 < ES_FA_KV ? fa->n_kv - j0 : ES_FA_KV);
		int kind = es_fa_block(blocks, mbase, mask, i0, nq, j0, w, mt);
		if (kind == ES_FA_HIDDEN) {
			continue;
		}
		bool any_hidden = kind == ES_FA_MIXED;
		for (int j = 0; j < w; j++) {
			es_fa_widen(kf + j * ES_FA_MAXD, (const uint16_t *)(kbase + (j0 + j) * k->nb[1]), D);
			es_fa_widen(vf + j * DV, (const uint16_t *)(vbase + (j0 + j) * v->nb[1]), DV);
		}
		for (int j = 0; j < w; j += 8) {
			es_fa_fma_scores(w - j < 8 ? w - j : 8, kf + j * ES_FA_MAXD, D, qf, s + j * ES_FA_Q);
		}
		if (exact) {
			// the maximum is final: nothing to rescale (alpha stays 1)
			es_fa_scale_mask(s, any_hidden ? mt : NULL, w, scale);
		} else {
			// online softmax, lanes over queries, as in es_fa_tile
			es_fa_rescale(s, any_hidden ? mt : NULL, w, scale, m, l, alpha);
		}
		for (int j = 0; j < w; j++) {
			for (int c = 0; c < 2; c++) {
				__m512 p = es_exp512(_mm512_sub_ps(_mm512_load_ps(s + j * ES_FA_Q + c * 16), m[c]));
				_mm512_store_ps(s + j * ES_FA_Q + c * 16, p);
				l[c] = _mm512_add_ps(l[c], p);
			}
		}
		// o = o * alpha + p . V, 4 queries by 64 values at a time (then 16)
		for (int64_t i = 0; i < ES_FA_Q; i += 4) {
			int64_t d = 0;
			for (; d + 64 <= DV; d += 64) {
				es_fa_fma_pv4(o + i * DV + d, DV, alpha + i, vf + d, DV, s + i, w);
			}
			for (; d < DV; d += 16) {
				es_fa_fma_pv1(o + i * DV + d, DV, alpha + i, vf + d, DV, s + i, w);
			}
		}
	}
	es_fa_out(fa, h, i3, i0, nq, o, l);
}
#endif

// es_fa_scratch_floats is the floats of a tile's scratch: es_fa_tile's layout, or
// es_fa_tile_fma's where it is the larger.
static size_t es_fa_scratch_floats(int64_t D, int64_t DV) {
	size_t dot = (size_t)(D / 2 * ES_FA_Q + ES_FA_Q * DV + 2 * ES_FA_KV * ES_FA_Q + 2 * (ES_FA_KV / 2 * ES_FA_Q) +
	                      ES_FA_KV / 2 * DV + ES_FA_Q);
	size_t fma = (size_t)(D * ES_FA_Q + ES_FA_Q * DV + 2 * ES_FA_KV * ES_FA_Q + ES_FA_KV * ES_FA_MAXD +
	                      ES_FA_KV * DV + ES_FA_Q);
	return dot > fma ? dot : fma;
}

// es_fa_classify_task classifies the blocks of one tile of queries (task: mask
// head x tile) as the mask hides them from all of its queries, from none, or
// neither (ES_FA_*).
static void es_fa_classify_task(void *arg, int task, int thread) {
	(void)thread;
	const struct es_fa *fa = arg;
	const struct ggml_tensor *mask = fa->mask;
	int64_t t = task % fa->q_tiles, mh = task / fa->q_tiles;
	int64_t i0 = t * ES_FA_Q;
	int64_t nq = fa->n_q - i0 < ES_FA_Q ? fa->n_q - i0 : ES_FA_Q;
	uint8_t *out = fa->blocks + task * fa->kv_blocks;
	for (int64_t b = 0; b < fa->kv_blocks; b++) {
		int64_t j0 = b * ES_FA_KV;
		int64_t w = fa->n_kv - j0 < ES_FA_KV ? fa->n_kv - j0 : ES_FA_KV;
		bool seen = false, hidden = false;
		for (int64_t i = 0; i < nq && !(seen && hidden); i++) {
			const uint16_t *m = (const uint16_t *)((const char *)mask->data + (i0 + i) * mask->nb[1] + mh * mask->nb[2]) + j0;
			int64_t j = 0;
			for (; j + 4 <= w; j += 4) { // four F16 values at a time
				uint64_t x;
				memcpy(&x, m + j, sizeof(x));
				if (x == 0xFC00FC00FC00FC00u) { // -inf
					hidden = true;
				} else if ((x & 0x7FFF7FFF7FFF7FFFu) == 0) {
					seen = true;
				} else {
					seen = hidden = true; // some of each, or a bias (added as it is)
				}
			}
			for (; j < w; j++) {
				if (m[j] == 0xFC00) {
					hidden = true;
				} else if ((m[j] & 0x7FFF) == 0) {
					seen = true;
				} else {
					seen = hidden = true;
				}
			}
		}
		out[b] = !seen ? ES_FA_HIDDEN : hidden ? ES_FA_MIXED : ES_FA_SEEN;
	}
}

static void es_fa_task(void *arg, int task, int thread) {
	const struct es_fa *fa = arg;
	int64_t t = task % fa->q_tiles;
	int64_t h = (task / fa->q_tiles) % fa->n_head;
	int64_t i3 = task / (fa->q_tiles * fa->n_head);
	int64_t i0 = t * ES_FA_Q;
	int64_t nq = fa->n_q - i0 < ES_FA_Q ? fa->n_q - i0 : ES_FA_Q;
	float *buf = es_scratch_get(&fa->scratch[thread], es_fa_scratch_floats(fa->D, fa->DV));
	fa->scratch[thread].packed_b = NULL;
#if ES_ACCEL_X86
	if (fa->exact || atomic_load_explicit(&es_bf16_fma, memory_order_relaxed)) {
		es_fa_tile_fma(fa, h, i3, i0, nq, buf, fa->exact);
	} else {
		es_fa_tile(fa, h, i3, i0, nq, buf);
	}
#else
	(void)buf; // never registered without the x86 kernels
	(void)h;
	(void)i3;
	(void)nq;
#endif
}

// es_flash_attn computes dst = FLASH_ATTN_EXT(q, k, v, mask) (es_supports_flash_attn
// says which), a task per tile of 32 queries of one head.
static void es_flash_attn(struct es_pool *pool, struct es_scratch *scratch, uint8_t **blocks, size_t *bcap,
                          struct ggml_tensor *dst, bool exact) {
	const struct ggml_tensor *q = dst->src[0];
	float scale;
	memcpy(&scale, (const float *)dst->op_params + 0, sizeof(float));
	struct es_fa fa = {
		.q = q,
		.k = dst->src[1],
		.v = dst->src[2],
		.mask = dst->src[3],
		.dst = dst,
		.scale = scale,
		.D = q->ne[0],
		.DV = dst->src[2]->ne[0],
		.n_q = q->ne[1],
		.n_kv = dst->src[1]->ne[1],
		.n_head = q->ne[2],
		.n_head_kv = dst->src[1]->ne[2],
		.scratch = scratch,
		.exact = exact,
	};
	fa.q_tiles = (fa.n_q + ES_FA_Q - 1) / ES_FA_Q;
	fa.kv_blocks = (fa.n_kv + ES_FA_KV - 1) / ES_FA_KV;
	int64_t tasks = fa.q_tiles * fa.n_head * q->ne[3];
	if (tasks == 0) {
		return;
	}
	if (fa.mask != NULL) {
		size_t need = (size_t)(fa.mask->ne[2] * fa.q_tiles * fa.kv_blocks);
		if (*bcap < need) {
			free(*blocks);
			*blocks = malloc(need);
			*bcap = need;
		}
		fa.blocks = *blocks;
		es_pool_run(pool, (int)(fa.mask->ne[2] * fa.q_tiles), es_fa_classify_task, &fa);
	}
	es_pool_run(pool, (int)tasks, es_fa_task, &fa);
}

// GELU, tanh approximation (ggml_gelu's definition), computed in float32.
#define ES_GELU_COEF_A 0.044715f
#define ES_SQRT_2_OVER_PI 0.79788456080286535587989211986876f

#if ES_ACCEL_X86
// tanh(u) = 1 - 2 / (exp(2u) + 1); |u| is clamped at 9, where tanh is 1 to float
// precision.
__attribute__((target("avx512f"))) static inline __m512 es_tanh512(__m512 u) {
	const __m512 lim = _mm512_set1_ps(9.0f);
	u = _mm512_max_ps(_mm512_min_ps(u, lim), _mm512_sub_ps(_mm512_setzero_ps(), lim));
	__m512 e = es_exp_poly512(_mm512_add_ps(u, u));
	__m512 one = _mm512_set1_ps(1.0f);
	return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

__attribute__((target("avx512f"))) static void es_gelu512(float *y, const float *x, int64_t n) {
	const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
	const __m512 ca = _mm512_set1_ps(ES_GELU_COEF_A), cs = _mm512_set1_ps(ES_SQRT_2_OVER_PI);
	int64_t i = 0;
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 v = _mm512_maskz_loadu_ps(m, x + i);
		__m512 u = _mm512_mul_ps(_mm512_mul_ps(cs, v), _mm512_fmadd_ps(_mm512_mul_ps(ca, v), v, one));
		__m512 g = _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, es_tanh512(u)));
		_mm512_mask_storeu_ps(y + i, m, g);
	}
}

__attribute__((target("avx2,fma"))) static inline __m256 es_tanh256(__m256 u) {
	const __m256 lim = _mm256_set1_ps(9.0f);
	u = _mm256_max_ps(_mm256_min_ps(u, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim));
	__m256 x = _mm256_add_ps(u, u);
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
	                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
	__m256 p = _mm256_set1_ps(1.0f / 720.0f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	// 2^n: n lies in [-26, 26] after the clamp, so the exponent field holds it.
	__m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	__m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
	__m256 one = _mm256_set1_ps(1.0f);
	return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

__attribute__((target("avx2,fma"))) static void es_gelu256(float *y, const float *x, int64_t n) {
	const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
	const __m256 ca = _mm256_set1_ps(ES_GELU_COEF_A), cs = _mm256_set1_ps(ES_SQRT_2_OVER_PI);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		__m256 u = _mm256_mul_ps(_mm256_mul_ps(cs, v), _mm256_fmadd_ps(_mm256_mul_ps(ca, v), v, one));
		__m256 g = _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, es_tanh256(u)));
		_mm256_storeu_ps(y + i, g);
	}
	for (; i < n; i++) {
		float v = x[i];
		y[i] = 0.5f * v * (1.0f + tanhf(ES_SQRT_2_OVER_PI * v * (1.0f + ES_GELU_COEF_A * v * v)));
	}
}
#endif // ES_ACCEL_X86

struct es_gelu {
	const struct ggml_tensor *src;
	struct ggml_tensor *dst;
	int64_t rows_per_task;
	int64_t rows;
};

static void es_gelu_task(void *arg, int task, int thread) {
	(void)thread;
	const struct es_gelu *g = arg;
	int64_t r0 = task * g->rows_per_task;
	int64_t r1 = r0 + g->rows_per_task < g->rows ? r0 + g->rows_per_task : g->rows;
	int64_t nc = g->src->ne[0];
	for (int64_t r = r0; r < r1; r++) {
		// rows of a contiguous tensor are consecutive whatever its shape
		const float *x = (const float *)g->src->data + r * nc;
		float *y = (float *)g->dst->data + r * nc;
#if ES_ACCEL_X86
		if (es_accel_isa == ES_ISA_AVX512) {
			es_gelu512(y, x, nc);
		} else {
			es_gelu256(y, x, nc);
		}
#else
		(void)x; // never registered without the x86 kernels
		(void)y;
#endif
	}
}

static void es_gelu_op(struct es_pool *pool, struct ggml_tensor *dst) {
	struct es_gelu g = {.src = dst->src[0], .dst = dst, .rows = ggml_nrows(dst->src[0])};
	int64_t tasks = 4 * (int64_t)pool->n_threads;
	g.rows_per_task = (g.rows + tasks - 1) / tasks;
	if (g.rows_per_task < 1) {
		g.rows_per_task = 1;
	}
	es_pool_run(pool, (int)((g.rows + g.rows_per_task - 1) / g.rows_per_task), es_gelu_task, &g);
}

// ---------------------------------------------------------------------------
// The buffer type llama.cpp stores BF16 weights in (see "Products with BF16 weight
// matrices"): host memory, so ggml's CPU backend computes with every other tensor
// in it as with its own, and a loader that writes a whole BF16 matrix of a weights
// buffer through set_tensor gets it repacked.

static const char *es_buft_get_name(ggml_backend_buffer_type_t buft) {
	(void)buft;
	return "ESK";
}

static void es_buffer_free(ggml_backend_buffer_t buffer) {
	free(buffer->context);
}

static void *es_buffer_get_base(ggml_backend_buffer_t buffer) {
	return buffer->context;
}

static void es_buffer_memset_tensor(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor, uint8_t value,
                                    size_t offset, size_t size) {
	(void)buffer;
	memset((char *)tensor->data + offset, value, size);
}

static void es_buffer_set_tensor(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor, const void *data,
                                 size_t offset, size_t size) {
	bool whole = buffer->usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS && offset == 0 && size == ggml_nbytes(tensor);
	if (es_load_panels != NULL && whole && es_listed_panels(tensor)) {
		// a panel file read without a mapping: its panels as they are
		memcpy(tensor->data, data, size);
		tensor->extra = &es_bf16_packed_mark;
		es_bf16_packed_here++;
		es_panels_taken++;
		return;
	}
	if (es_load_panels == NULL && whole && tensor->view_src == NULL && es_bf16_matrix(tensor)) {
		es_bf16_repack(tensor->data, data, tensor->nb[1], tensor->ne[0], tensor->ne[1]);
		tensor->extra = &es_bf16_packed_mark;
		es_bf16_packed_here++;
		es_release_source(data, size);
		return;
	}
	if (whole && tensor->view_src == NULL && es_q8_matrix(tensor)) {
		es_bf16_packed_here++; // the device's from now on, in the file's layout
	}
	if (tensor->extra == &es_bf16_packed_mark) {
		// a piece written over a repacked matrix: back to the file's layout first
		size_t n = ggml_nbytes(tensor);
		char *plain = malloc(n);
		es_bf16_unpack(plain, tensor->nb[1], tensor->data, tensor->ne[0], tensor->ne[1]);
		memcpy(tensor->data, plain, n);
		free(plain);
		tensor->extra = NULL;
	}
	memcpy((char *)tensor->data + offset, data, size);
}

static void es_buffer_get_tensor(ggml_backend_buffer_t buffer, const struct ggml_tensor *tensor, void *data,
                                 size_t offset, size_t size) {
	(void)buffer;
	if (tensor->extra == &es_bf16_packed_mark) {
		size_t n = ggml_nbytes(tensor);
		char *plain = offset == 0 && size == n ? data : malloc(n);
		es_bf16_unpack(plain, tensor->nb[1], tensor->data, tensor->ne[0], tensor->ne[1]);
		if (plain != data) {
			memcpy(data, plain + offset, size);
			free(plain);
		}
		return;
	}
	memcpy(data, (const char *)tensor->data + offset, size);
}

static void es_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value) {
	memset(buffer->context, value, buffer->size);
}

static const struct ggml_backend_buffer_i es_buffer_i = {
	.free_buffer = es_buffer_free,
	.get_base = es_buffer_get_base,
	.memset_tensor = es_buffer_memset_tensor,
	.set_tensor = es_buffer_set_tensor,
	.get_tensor = es_buffer_get_tensor,
	.clear = es_buffer_clear,
};

// es_mapped_init_tensor marks the panels of a file mapped into the buffer as
// llama.cpp places each weight; the file's other matrices there stay in its row
// layout and are packed per product (Q8_0 ones by design, es_q8_pack).
static enum ggml_status es_mapped_init_tensor(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor) {
	(void)buffer;
	if (es_listed_panels(tensor)) {
		tensor->extra = &es_bf16_packed_mark;
		es_bf16_packed_here++;
		es_panels_taken++;
	} else if (tensor->view_src == NULL && es_q8_matrix(tensor)) {
		es_bf16_packed_here++;
		es_q8_mapped_here++;
	}
	return GGML_STATUS_SUCCESS;
}

// A buffer over llama.cpp's read-only mapping of a panel file: llama.cpp unmaps it
// with the model, so freeing the buffer frees nothing, and nothing writes to it
// (the loader places weights in it with ggml_backend_tensor_alloc).
static const struct ggml_backend_buffer_i es_mapped_buffer_i = {
	.free_buffer = NULL,
	.get_base = es_buffer_get_base,
	.init_tensor = es_mapped_init_tensor,
	.memset_tensor = es_buffer_memset_tensor,
	.set_tensor = es_buffer_set_tensor,
	.get_tensor = es_buffer_get_tensor,
	.clear = NULL,
};

static ggml_backend_buffer_t es_buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
	void *data = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
	if (data == NULL) {
		return NULL;
	}
	return ggml_backend_buffer_init(buft, es_buffer_i, data, size);
}

static size_t es_buft_get_alignment(ggml_backend_buffer_type_t buft) {
	(void)buft;
	return 64;
}

static size_t es_buft_get_alloc_size(ggml_backend_buffer_type_t buft, const struct ggml_tensor *tensor) {
	(void)buft;
	size_t n = ggml_nbytes(tensor);
	// Loading a panel file, every matrix stays its bytes: whole panels as they
	// are, the others in the file's row layout (packed per product).
	if (es_load_panels == NULL && tensor->view_src == NULL && es_bf16_matrix(tensor)) {
		size_t packed = es_bf16_packed_size(tensor);
		return packed > n ? packed : n;
	}
	return n;
}

static bool es_buft_is_host(ggml_backend_buffer_type_t buft) {
	(void)buft;
	return true;
}

static struct ggml_backend_buffer_type es_buft = {
	.iface =
		{
			.get_name = es_buft_get_name,
			.alloc_buffer = es_buft_alloc_buffer,
			.get_alignment = es_buft_get_alignment,
			.get_alloc_size = es_buft_get_alloc_size,
			.is_host = es_buft_is_host,
		},
	.context = NULL,
};

// es_dev_buffer_from_host_ptr is the device's buffer over a panel file's mapping.
static ggml_backend_buffer_t es_dev_buffer_from_host_ptr(ggml_backend_dev_t dev, void *ptr, size_t size,
                                                         size_t max_tensor_size) {
	(void)dev;
	(void)max_tensor_size;
	return ggml_backend_buffer_init(&es_buft, es_mapped_buffer_i, ptr, size);
}

// ---------------------------------------------------------------------------
// Which operations the device takes

// A decoder's LM head: the product of the final hidden states with the output
// matrix (the token embeddings where the head is tied), which llama.cpp's graph
// names "result_output" and computes for every output row, embeddings on or off.
// The engine reads hidden states only (a reranker's two logits come from its own
// rows of the head, yesNoHead), so the device takes the product and writes
// nothing: on Qwen3-Embedding-0.6B it is 151669 x 1024 values a sequence, 311 MB
// of F16 read for every call, and with BF16 weights those rows were packed into
// panels for every call too (two fifths of the time of one 16-token input on an
// Emerald Rapids host). The logits llama.cpp copies out are then whatever the
// buffer held; nothing reads them.
static bool es_lm_head(const struct ggml_tensor *op) {
	return op->op == GGML_OP_MUL_MAT && strcmp(op->name, "result_output") == 0;
}

// es_head_matrix says whether w is a matrix only an LM head multiplies by: the
// output matrix, or the token embeddings where the head is tied to them (llama.cpp
// gives the head a tensor of its own when the head's buffer type differs from the
// input's). While the device skips heads, the loader leaves them in ggml's buffer,
// so that a BF16 one is not repacked (nor a tied one placed twice) for a product
// that never runs.
static bool es_head_matrix(const struct ggml_tensor *w) {
	return strcmp(w->name, "output.weight") == 0 || strcmp(w->name, "token_embd.weight") == 0;
}

static bool es_skips_heads(void) {
	return atomic_load(&es_accel_on) && (atomic_load(&es_accel_ops) & ES_ACCEL_OP_HEAD);
}

static bool es_is_f32_rows(const struct ggml_tensor *t) {
	return t->type == GGML_TYPE_F32 && t->nb[0] == sizeof(float);
}

static bool es_supports_mul_mat(const struct ggml_tensor *op) {
	const struct ggml_tensor *src0 = op->src[0], *src1 = op->src[1];
	if (!(atomic_load(&es_accel_ops) & ES_ACCEL_OP_KQ)) {
		return false;
	}
	// Only what ggml's CPU backend does one dot product at a time: a non-contiguous
	// F32 second operand. Contiguous ones go to its matrix kernels, which are fast.
	if (!es_is_f32_rows(src0) || !es_is_f32_rows(src1) || !es_is_f32_rows(op) || ggml_is_contiguous(src1)) {
		return false;
	}
	if (op->nb[1] % sizeof(float) != 0 || src0->ne[2] == 0 || src0->ne[3] == 0) {
		return false;
	}
	if (src1->ne[2] % src0->ne[2] != 0 || src1->ne[3] % src0->ne[3] != 0) {
		return false;
	}
	// Worth a split of the graph only when there is a matrix to multiply.
	return src0->ne[0] >= 8 && src0->ne[1] >= 8 && src1->ne[1] >= 8;
}

// A product with a model's F32 weight matrix: ggml's tinyBLAS reads the weights in
// place, a dot product along K per output; this backend multiplies them from a copy
// laid out in panels of 32 columns (packed once per context, es_weights), which
// measured 1.3 to 1.9 times as fast on all-MiniLM-L6-v2's matrices (Zen 5).
static bool es_supports_weight_mm(const struct ggml_tensor *op) {
	const struct ggml_tensor *src0 = op->src[0], *src1 = op->src[1];
	if (!(atomic_load(&es_accel_ops) & ES_ACCEL_OP_WEIGHTS)) {
		return false;
	}
	if (src0->type != GGML_TYPE_F32 || !ggml_is_contiguous(src0) || src0->ne[2] != 1 || src0->ne[3] != 1) {
		return false;
	}
	if (src0->buffer == NULL || ggml_backend_buffer_get_usage(src0->buffer) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS) {
		return false;
	}
	if (src1->type != GGML_TYPE_F32 || !ggml_is_contiguous(src1) || op->type != GGML_TYPE_F32 || !ggml_is_contiguous(op)) {
		return false;
	}
	return src0->ne[0] >= 16 && src0->ne[1] >= 16;
}

static bool es_supports_gelu(const struct ggml_tensor *op) {
	if (!(atomic_load(&es_accel_ops) & ES_ACCEL_OP_GELU)) {
		return false;
	}
	const struct ggml_tensor *src = op->src[0];
	return ggml_get_unary_op(op) == GGML_UNARY_OP_GELU && src->type == GGML_TYPE_F32 &&
	       op->type == GGML_TYPE_F32 && ggml_is_contiguous(src) && ggml_is_contiguous(op) &&
	       ggml_are_same_shape(src, op);
}

// A product with a BF16 matrix stored in es_buft: taken whatever the switches say
// now, as a repacked matrix is in no layout another backend reads.
static bool es_supports_bf16_mm(const struct ggml_tensor *op) {
	const struct ggml_tensor *w = op->src[0], *x = op->src[1];
	if (es_loading_model && es_head_matrix(w) && es_skips_heads()) {
		return false;
	}
	if (w->buffer == NULL || w->buffer->buft != &es_buft || w->view_src != NULL || !es_bf16_matrix(w)) {
		return false;
	}
	return x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && op->type == GGML_TYPE_F32 &&
	       ggml_is_contiguous(op);
}

// A product with a Q8_0 matrix (see "Products with Q8_0 weight matrices"): while a
// model loads, the matrices es_load_q8 lets the device take go to es_buft (llama.cpp
// asks with 512 rows); after, every product with a matrix there, whatever its rows
// (a vector must not depend on the call's size). As for BF16 matrices, the switches
// count as the model loads only: a model's matrices are the device's or not for its
// life.
static bool es_supports_q8_mm(const struct ggml_tensor *op) {
	const struct ggml_tensor *w = op->src[0], *x = op->src[1];
	if (es_loading_model && (!es_load_q8 || (es_head_matrix(w) && es_skips_heads()))) {
		return false;
	}
	if (!es_bf16_dot || w->buffer == NULL || w->buffer->buft != &es_buft || w->view_src != NULL || !es_q8_matrix(w)) {
		return false;
	}
	return x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && op->type == GGML_TYPE_F32 &&
	       ggml_is_contiguous(op);
}

// es_fa_fits says whether es_flash_attn takes heads of D key and DV value widths.
static bool es_fa_fits(int64_t D, int64_t DV) {
	return D > 0 && DV > 0 && D % 2 == 0 && DV % 16 == 0 && D <= ES_FA_MAXD && DV <= ES_FA_MAXD;
}

// Flash attention over a BF16 K and V cache (es_flash_attn): what a decoder's long
// context asks for where es_accel_bf16_attention says so. Attention with ALiBi,
// a logit soft cap or sinks, and any other cache type, stay with ggml.
static bool es_supports_flash_attn(const struct ggml_tensor *op) {
	if (!es_bf16_dot || !(atomic_load(&es_accel_ops) & ES_ACCEL_OP_ATTN)) {
		return false;
	}
	const struct ggml_tensor *q = op->src[0], *k = op->src[1], *v = op->src[2], *mask = op->src[3];
	float params[3];
	memcpy(params, op->op_params, sizeof(params)); // scale, max_bias, logit_softcap
	if (op->src[4] != NULL || params[1] != 0.0f || params[2] != 0.0f) {
		return false;
	}
	if (q->type != GGML_TYPE_F32 || q->nb[0] != sizeof(float) || k->type != GGML_TYPE_BF16 ||
	    v->type != GGML_TYPE_BF16 || k->nb[0] != 2 || v->nb[0] != 2) {
		return false;
	}
	if (op->type != GGML_TYPE_F32 || !ggml_is_contiguous(op)) {
		return false;
	}
	int64_t D = q->ne[0], DV = v->ne[0];
	if (k->ne[0] != D || !es_fa_fits(D, DV)) {
		return false;
	}
	if (k->ne[1] != v->ne[1] || k->ne[2] != v->ne[2] || k->ne[2] == 0 || q->ne[2] % k->ne[2] != 0 ||
	    k->nb[1] % 4 != 0 || v->nb[1] % 4 != 0) {
		return false;
	}
	if (q->ne[3] != 1 || k->ne[3] != 1 || v->ne[3] != 1) {
		return false;
	}
	return mask == NULL || (mask->type == GGML_TYPE_F16 && mask->nb[0] == 2 && mask->ne[0] >= k->ne[1] &&
	                        mask->ne[1] >= q->ne[1] && mask->ne[3] == 1);
}

static bool es_dev_supports_op(ggml_backend_dev_t dev, const struct ggml_tensor *op) {
	(void)dev;
	if (es_lm_head(op) && es_skips_heads()) {
		return true;
	}
	if (op->op == GGML_OP_MUL_MAT && op->src[0]->type == GGML_TYPE_BF16) {
		return es_supports_bf16_mm(op);
	}
	if (op->op == GGML_OP_MUL_MAT && op->src[0]->type == GGML_TYPE_Q8_0) {
		return es_supports_q8_mm(op);
	}
	if (!atomic_load(&es_accel_on)) {
		return false;
	}
	switch (op->op) {
	case GGML_OP_NONE:
	case GGML_OP_RESHAPE:
	case GGML_OP_VIEW:
	case GGML_OP_PERMUTE:
	case GGML_OP_TRANSPOSE:
		return true;
	case GGML_OP_MUL_MAT:
		return es_supports_mul_mat(op) || es_supports_weight_mm(op);
	case GGML_OP_UNARY:
		return es_supports_gelu(op);
	case GGML_OP_FLASH_ATTN_EXT:
		return es_supports_flash_attn(op);
	default:
		return false;
	}
}

// ---------------------------------------------------------------------------
// ggml backend plumbing

// A backend per llama.cpp context: several models served side by side compute at
// once, each with its own workers and packing buffers.
struct es_backend_ctx {
	struct es_pool pool;
	int pinned; // the pool's threads, es_init_context's; 0: llama.cpp's count
	bool exact_attention; // es_init_context's (struct es_fa)
	struct es_scratch scratch[ES_MAX_THREADS];
	struct es_weights weights;
	uint32_t *abuf; // the F32 operand of a BF16 product, converted
	size_t acap;
	uint8_t *fa_blocks; // flash attention's block classes (struct es_fa)
	size_t fa_bcap;
};

static const char *es_backend_get_name(ggml_backend_t backend) {
	(void)backend;
	return "ESK";
}

static void es_backend_free(ggml_backend_t backend) {
	struct es_backend_ctx *ctx = backend->context;
	es_pool_stop(&ctx->pool);
	for (int t = 0; t < ES_MAX_THREADS; t++) {
		free(ctx->scratch[t].buf);
	}
	es_weights_release(&ctx->weights);
	free(ctx->abuf);
	free(ctx->fa_blocks);
	pthread_mutex_destroy(&ctx->pool.mu);
	pthread_cond_destroy(&ctx->pool.wake);
	free(ctx);
	free(backend);
}

static enum ggml_status es_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph *cgraph, int batch_size) {
	(void)batch_size;
	struct es_backend_ctx *ctx = backend->context;
	for (int i = 0; i < ggml_graph_n_nodes(cgraph); i++) {
		struct ggml_tensor *node = ggml_graph_node(cgraph, i);
		if (es_lm_head(node) && es_skips_heads()) {
			atomic_fetch_add_explicit(&es_accel_heads_skipped, 1, memory_order_relaxed);
			continue;
		}
		switch (node->op) {
		case GGML_OP_MUL_MAT:
			if (node->src[0]->type == GGML_TYPE_BF16 || node->src[0]->type == GGML_TYPE_Q8_0) {
				es_bf16_mul_mat(&ctx->pool, ctx->scratch, &ctx->abuf, &ctx->acap, node);
				if (node->src[0]->type == GGML_TYPE_Q8_0) {
					atomic_fetch_add_explicit(&es_accel_q8_computed, 1, memory_order_relaxed);
				}
			} else if (ggml_is_contiguous(node->src[1])) {
				es_weight_mul_mat(&ctx->pool, ctx->scratch, &ctx->weights, node);
			} else {
				es_mul_mat(&ctx->pool, ctx->scratch, node);
			}
			break;
		case GGML_OP_UNARY:
			es_gelu_op(&ctx->pool, node);
			break;
		case GGML_OP_FLASH_ATTN_EXT:
			es_flash_attn(&ctx->pool, ctx->scratch, &ctx->fa_blocks, &ctx->fa_bcap, node, ctx->exact_attention);
			break;
		case GGML_OP_NONE:
		case GGML_OP_RESHAPE:
		case GGML_OP_VIEW:
		case GGML_OP_PERMUTE:
		case GGML_OP_TRANSPOSE:
			break;
		default:
			return GGML_STATUS_FAILED;
		}
		if (node->op == GGML_OP_MUL_MAT || node->op == GGML_OP_UNARY || node->op == GGML_OP_FLASH_ATTN_EXT) {
			atomic_fetch_add_explicit(&es_accel_computed, 1, memory_order_relaxed);
		}
	}
	return GGML_STATUS_SUCCESS;
}

static struct ggml_backend_i es_backend_i = {
	.get_name = es_backend_get_name,
	.free = es_backend_free,
	.graph_compute = es_backend_graph_compute,
};

static ggml_guid_t es_backend_guid(void) {
	static ggml_guid guid = {0x65, 0x6d, 0x62, 0x65, 0x64, 0x2d, 0x73, 0x74,
	                         0x61, 0x63, 0x6b, 0x2d, 0x45, 0x53, 0x4b, 0x01};
	return &guid;
}

static ggml_backend_dev_t es_device(void);

// The device's threads for the backends es_init_context's llama_init_from_model
// creates on this thread (0 outside it).
static _Thread_local int es_init_threads;
static _Thread_local bool es_init_exact;
static _Thread_local struct es_backend_ctx *es_init_made;

static ggml_backend_t es_dev_init_backend(ggml_backend_dev_t dev, const char *params) {
	(void)params;
	struct es_backend_ctx *ctx = calloc(1, sizeof *ctx);
	pthread_mutex_init(&ctx->pool.mu, NULL);
	pthread_cond_init(&ctx->pool.wake, NULL);
	ctx->pool.n_threads = 1;
	ctx->exact_attention = es_init_exact;
	if (es_init_threads > 0) {
		ctx->pinned = es_init_threads < ES_MAX_THREADS ? es_init_threads : ES_MAX_THREADS;
		es_pool_start(&ctx->pool, ctx->pinned);
		es_init_made = ctx;
	}
	ggml_backend_t backend = calloc(1, sizeof *backend);
	backend->guid = es_backend_guid();
	backend->iface = es_backend_i;
	backend->device = dev;
	backend->context = ctx;
	return backend;
}

static void es_set_n_threads(ggml_backend_t backend, int n_threads) {
	struct es_backend_ctx *ctx = backend->context;
	if (ctx->pinned > 0) {
		return;
	}
	if (n_threads > ES_MAX_THREADS) {
		n_threads = ES_MAX_THREADS;
	}
	if (n_threads != ctx->pool.n_threads) {
		es_pool_start(&ctx->pool, n_threads);
	}
}

static const char *es_dev_get_name(ggml_backend_dev_t dev) {
	(void)dev;
	return "ESK";
}

static const char *es_dev_get_description(ggml_backend_dev_t dev) {
	(void)dev;
	if (es_accel_isa == ES_ISA_AVX512) {
		if (es_accel_bf16 && atomic_load(&es_bf16_amx) != 0) {
			return "embed-stack kernels (AVX-512, BF16, AMX)";
		}
		if (!es_bf16_dot) {
			return "embed-stack kernels (AVX-512, BF16 in FMAs)"; // no AVX512_BF16 (es_bf16_dot)
		}
		return "embed-stack kernels (AVX-512, BF16)";
	}
	return es_accel_bf16 ? "embed-stack kernels (AVX2, BF16)" : "embed-stack kernels (AVX2)";
}

static void es_dev_get_memory(ggml_backend_dev_t dev, size_t *free_mem, size_t *total) {
	(void)dev;
	*free_mem = 0;
	*total = 0;
}

static enum ggml_backend_dev_type es_dev_get_type(ggml_backend_dev_t dev) {
	(void)dev;
	return GGML_BACKEND_DEVICE_TYPE_ACCEL;
}

static void es_dev_get_props(ggml_backend_dev_t dev, struct ggml_backend_dev_props *props) {
	props->name = es_dev_get_name(dev);
	props->description = es_dev_get_description(dev);
	props->type = es_dev_get_type(dev);
	es_dev_get_memory(dev, &props->memory_free, &props->memory_total);
	props->caps.async = false;
	props->caps.host_buffer = false;
	// only while a panel file loads, or a file whose matrices the device takes are
	// Q8_0 ones: a plain file's BF16 matrices, mapped, would be packed on every
	// product
	props->caps.buffer_from_host_ptr = es_load_panels != NULL || es_load_mapped;
	props->caps.events = false;
}

// The CPU backend's buffer type, the very object: the scheduler moves an operation
// to this device only when both name the same buffer type, and with a CPU kernel
// variant loaded that is the variant library's, not the one compiled in.
//
// While es_model_load loads a model on a CPU with AVX512_BF16 (the device on, BF16
// products among its operations), es_buft instead: llama.cpp offers it for every
// weight and stores there the BF16 matrices the device takes (es_supports_bf16_mm);
// the CPU backend uses it as host memory. Only then: a context takes its backends'
// buffer types for their activations, and with es_buft there no operation came
// here unless a repacked weight's product was among its neighbours (pass 2 of
// ggml_backend_sched_split_graph), never through pass 3. A model with F16 weights
// then ran its long context's flash attention over the BF16 cache in ggml's kernel,
// one query at a time: a 2048-token input on the 0.6B shape took 42.9 s against
// 26.3 s with the plain kernel (Intel Emerald Rapids, 2 threads).
static ggml_backend_buffer_type_t es_dev_get_buffer_type(ggml_backend_dev_t dev) {
	(void)dev;
	if (es_loading_model && (es_accel_bf16_products() || es_load_q8)) {
		return &es_buft;
	}
	ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
	return cpu ? ggml_backend_dev_buffer_type(cpu) : ggml_backend_cpu_buffer_type();
}

static bool es_dev_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) {
	(void)dev;
	return ggml_backend_buft_is_host(buft);
}

static struct ggml_backend_device_i es_device_i = {
	.get_name = es_dev_get_name,
	.get_description = es_dev_get_description,
	.get_memory = es_dev_get_memory,
	.get_type = es_dev_get_type,
	.get_props = es_dev_get_props,
	.init_backend = es_dev_init_backend,
	.get_buffer_type = es_dev_get_buffer_type,
	.supports_op = es_dev_supports_op,
	.supports_buft = es_dev_supports_buft,
	.buffer_from_host_ptr = es_dev_buffer_from_host_ptr,
};

static const char *es_reg_get_name(ggml_backend_reg_t reg) {
	(void)reg;
	return "ESK";
}

static size_t es_reg_get_device_count(ggml_backend_reg_t reg) {
	(void)reg;
	return 1;
}

static ggml_backend_dev_t es_reg_get_device(ggml_backend_reg_t reg, size_t index) {
	(void)reg;
	(void)index;
	return es_device();
}

static void *es_reg_get_proc_address(ggml_backend_reg_t reg, const char *name) {
	(void)reg;
	if (strcmp(name, "ggml_backend_set_n_threads") == 0) {
		return (void *)es_set_n_threads;
	}
	return NULL;
}

static struct ggml_backend_reg_i es_reg_i = {
	.get_name = es_reg_get_name,
	.get_device_count = es_reg_get_device_count,
	.get_device = es_reg_get_device,
	.get_proc_address = es_reg_get_proc_address,
};

static struct ggml_backend_reg es_reg = {
	.api_version = GGML_BACKEND_API_VERSION,
	.iface = {0},
	.context = NULL,
};

static struct ggml_backend_device es_dev = {
	.iface = {0},
	.reg = &es_reg,
	.context = NULL,
};

static ggml_backend_dev_t es_device(void) {
	return &es_dev;
}

static pthread_once_t es_register_once = PTHREAD_ONCE_INIT;
static bool es_registered;
static int es_detected_isa; // what the CPU runs; es_accel_isa may be forced lower

static void es_register(void) {
	es_accel_isa = es_detected_isa = es_accel_isa_detect();
	if (es_accel_isa == ES_ISA_NONE) {
		return;
	}
#if ES_ACCEL_X86
	es_amx_usable = es_detected_isa == ES_ISA_AVX512 && es_amx_detect();
#endif
	es_reg.iface = es_reg_i;
	es_dev.iface = es_device_i;
	es_buft.device = &es_dev;
	ggml_backend_register(&es_reg);
	es_registered = true;
}

static int es_amx_mode(int mode);

const char *es_accel_register(int isa) {
	pthread_once(&es_register_once, es_register);
	if (!es_registered) {
		return NULL;
	}
	if (isa == ES_ACCEL_ISA_AVX512 && es_detected_isa < ES_ISA_AVX512) {
		return NULL;
	}
	es_accel_isa = isa == ES_ACCEL_ISA_AUTO ? es_detected_isa : isa;
#if ES_ACCEL_X86
	es_bf16_dot = es_accel_isa == ES_ISA_AVX512 && __builtin_cpu_supports("avx512bf16") && es_bf16_dot_forced != 0;
	es_accel_bf16 = es_accel_isa != ES_ISA_NONE;
	atomic_store(&es_bf16_fma, es_bf16_fma_forced >= 0 ? es_bf16_fma_forced : __builtin_cpu_is("intel") != 0);
	atomic_store(&es_bf16_amx, es_amx_mode(es_bf16_amx_forced));
#endif
	return es_dev_get_description(&es_dev);
}

// es_amx_mode is es_bf16_amx for a request (es_accel_set_bf16_amx's mode): none
// without the AVX-512 BF16 kernels or usable tiles.
static int es_amx_mode(int mode) {
	if (!es_bf16_dot || !es_amx_usable) {
		return 0;
	}
	if (mode < 0) {
		const char *env = getenv("EMBED_STACK_AMX");
		return env != NULL && (strcmp(env, "off") == 0 || strcmp(env, "0") == 0) ? 0 : 1;
	}
	return mode != 0;
}

int es_accel_bf16_amx(void) {
	return atomic_load(&es_bf16_amx);
}

void es_accel_set_bf16_amx(int mode) {
	pthread_once(&es_register_once, es_register);
	es_bf16_amx_forced = mode < 0 ? -1 : mode;
	atomic_store(&es_bf16_amx, es_amx_mode(es_bf16_amx_forced));
}

bool es_accel_bf16_fma(void) {
	return atomic_load(&es_bf16_fma) != 0 || (es_accel_bf16 && !es_bf16_dot);
}

void es_accel_set_bf16_dot(int dot) {
	pthread_once(&es_register_once, es_register);
	es_bf16_dot_forced = dot < 0 ? -1 : dot != 0;
}

void es_accel_set_bf16_fma(int fma) {
	pthread_once(&es_register_once, es_register);
	es_bf16_fma_forced = fma < 0 ? -1 : fma != 0;
#if ES_ACCEL_X86
	atomic_store(&es_bf16_fma, fma >= 0 ? fma != 0 : __builtin_cpu_is("intel") != 0);
#endif
}

bool es_accel_bf16_products(void) {
	return es_accel_bf16 && atomic_load(&es_accel_on) && (atomic_load(&es_accel_ops) & ES_ACCEL_OP_BF16);
}

bool es_accel_bf16_attention(int64_t key_length, int64_t value_length) {
	return es_bf16_dot && atomic_load(&es_accel_on) && (atomic_load(&es_accel_ops) & ES_ACCEL_OP_ATTN) &&
	       es_fa_fits(key_length, value_length);
}

// The jobs of es_accel_test_pool: each task checks that it belongs to the job
// running (es_probe_current) and lies within it.
struct es_probe {
	int id, n;
};
static atomic_int es_probe_current;
static atomic_long es_probe_bad;

static void es_probe_task(void *arg, int task, int thread) {
	(void)thread;
	const struct es_probe *pr = arg;
	if (atomic_load_explicit(&es_probe_current, memory_order_relaxed) != pr->id || task >= pr->n) {
		atomic_fetch_add(&es_probe_bad, 1);
	}
}

long es_accel_test_pool(int n_threads, int jobs, bool linger) {
	struct es_pool p;
	memset(&p, 0, sizeof p);
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.wake, NULL);
	atomic_store(&p.linger, linger);
	es_pool_start(&p, n_threads);
	struct es_probe *probes = calloc((size_t)jobs, sizeof *probes);
	atomic_store(&es_probe_bad, 0);
	for (int j = 0; j < jobs; j++) {
		// task counts that alternate between few and many, as a forward's do
		probes[j].id = j + 1;
		probes[j].n = j % 2 == 0 ? 2 : 2 + j % 61;
		atomic_store(&es_probe_current, j + 1);
		es_pool_run(&p, probes[j].n, es_probe_task, &probes[j]);
		atomic_store(&es_probe_current, 0);
	}
	es_pool_stop(&p);
	pthread_mutex_destroy(&p.mu);
	pthread_cond_destroy(&p.wake);
	free(probes);
	return atomic_load(&es_probe_bad);
}

int es_accel_test_flash_attn(struct ggml_tensor *dst, int n_threads, bool exact) {
	pthread_once(&es_register_once, es_register);
	if (dst->op != GGML_OP_FLASH_ATTN_EXT || !es_supports_flash_attn(dst)) {
		return -1;
	}
	ggml_backend_t backend = es_dev_init_backend(&es_dev, NULL);
	es_set_n_threads(backend, n_threads);
	struct es_backend_ctx *ctx = backend->context;
	es_flash_attn(&ctx->pool, ctx->scratch, &ctx->fa_blocks, &ctx->fa_bcap, dst, exact);
	es_backend_free(backend);
	return 0;
}

void es_accel_set_enabled(bool on) {
	atomic_store(&es_accel_on, on ? 1 : 0);
}

void es_accel_set_ops(int ops) {
	atomic_store(&es_accel_ops, ops);
}

long long es_accel_computed_ops(void) {
	return atomic_load(&es_accel_computed);
}

long long es_accel_skipped_heads(void) {
	return atomic_load(&es_accel_heads_skipped);
}

long es_accel_q8_mapped(void) {
	return es_accel_last_q8_mapped;
}

long long es_accel_q8_products(void) {
	return atomic_load(&es_accel_q8_computed);
}

void es_accel_set_packed_budget(size_t bytes) {
	pthread_mutex_lock(&es_packed_mu);
	es_packed_budget = bytes;
	pthread_mutex_unlock(&es_packed_mu);
}

int es_accel_test_compute(struct ggml_tensor *dst, int n_threads, int avx2) {
	pthread_once(&es_register_once, es_register);
	// A tensor of a plain ggml context has no buffer to say it holds weights: a
	// product with a contiguous F32 second operand stands for one here.
	bool weights = dst->op == GGML_OP_MUL_MAT && dst->src[0]->type == GGML_TYPE_F32 &&
	               ggml_is_contiguous(dst->src[0]) && ggml_is_contiguous(dst->src[1]) &&
	               dst->src[0]->ne[2] == 1 && dst->src[0]->ne[3] == 1;
	if (es_accel_isa == ES_ISA_NONE || !(weights || es_dev_supports_op(&es_dev, dst))) {
		return -1;
	}
	int isa = es_accel_isa;
	if (avx2) {
		es_accel_isa = ES_ISA_AVX2;
	}
	ggml_backend_t backend = es_dev_init_backend(&es_dev, NULL);
	es_set_n_threads(backend, n_threads);
	struct es_backend_ctx *ctx = backend->context;
	if (dst->op == GGML_OP_MUL_MAT && ggml_is_contiguous(dst->src[1])) {
		es_weight_mul_mat(&ctx->pool, ctx->scratch, &ctx->weights, dst);
	} else if (dst->op == GGML_OP_MUL_MAT) {
		es_mul_mat(&ctx->pool, ctx->scratch, dst);
	} else {
		es_gelu_op(&ctx->pool, dst);
	}
	es_backend_free(backend);
	es_accel_isa = isa;
	return 0;
}

int es_accel_test_bf16_convert(uint32_t *dst, const float *x, int64_t n, int avx2) {
	pthread_once(&es_register_once, es_register);
#if ES_ACCEL_X86
	if (avx2 && es_detected_isa >= ES_ISA_AVX2) {
		es_bf16_convert256(dst, x, n);
		return 0;
	}
	if (!avx2 && es_detected_isa == ES_ISA_AVX512 && __builtin_cpu_supports("avx512bf16")) {
		es_bf16_convert(dst, x, n);
		return 0;
	}
#endif
	(void)dst;
	(void)x;
	(void)n;
	return -1;
}

int es_accel_test_bf16(struct ggml_tensor *dst, int n_threads, int packed) {
	pthread_once(&es_register_once, es_register);
	struct ggml_tensor *w = dst->src[0];
	if (!es_accel_bf16 || !(es_bf16_matrix(w) || (es_q8_matrix(w) && !packed && es_bf16_dot)) || dst->op != GGML_OP_MUL_MAT) {
		return -1;
	}
	void *plain = w->data;
	size_t n = ggml_nbytes(w);
	ggml_backend_buffer_t buf = NULL;
	if (packed) {
		// As llama.cpp's loader stores a weight: a buffer of es_buft marked as
		// holding weights, the whole matrix written at once.
		buf = ggml_backend_buft_alloc_buffer(&es_buft, es_buft_get_alloc_size(&es_buft, w));
		ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
		w->data = NULL;
		ggml_backend_tensor_alloc(buf, w, ggml_backend_buffer_get_base(buf));
		ggml_backend_tensor_set(w, plain, 0, n);
	}
	ggml_backend_t backend = es_dev_init_backend(&es_dev, NULL);
	es_set_n_threads(backend, n_threads);
	struct es_backend_ctx *ctx = backend->context;
	es_bf16_mul_mat(&ctx->pool, ctx->scratch, &ctx->abuf, &ctx->acap, dst);
	es_backend_free(backend);
	int rc = 0;
	if (packed) {
		if (w->extra != &es_bf16_packed_mark) {
			rc = -3;
		}
		char *back = malloc(n);
		ggml_backend_tensor_get(w, back, 0, n);
		if (memcmp(back, plain, n) != 0) {
			rc = -2;
		}
		free(back);
		w->data = plain;
		w->buffer = NULL;
		w->extra = NULL;
		ggml_backend_buffer_free(buf);
	}
	return rc;
}

// es_panels_of returns the metadata of path when it holds matrices as panels of
// ES_PANEL columns (ES_PANELS_KEY, ES_PANEL_WIDTH_KEY), else NULL, and how many;
// also whether it holds Q8_0 tensors and BF16 ones.
static struct gguf_context *es_panels_of(const char *path, size_t *listed, bool *q8, bool *bf16) {
	*listed = 0;
	*q8 = *bf16 = false;
	struct gguf_context *meta = gguf_init_from_file(path, (struct gguf_init_params){.no_alloc = true, .ctx = NULL});
	if (meta == NULL) {
		return NULL; // llama.cpp's load says why
	}
	for (int64_t i = 0; i < gguf_get_n_tensors(meta); i++) {
		enum ggml_type t = gguf_get_tensor_type(meta, i);
		*q8 = *q8 || t == GGML_TYPE_Q8_0;
		*bf16 = *bf16 || t == GGML_TYPE_BF16;
	}
	int64_t id = gguf_find_key(meta, ES_PANELS_KEY), w = gguf_find_key(meta, ES_PANEL_WIDTH_KEY);
	if (id >= 0 && gguf_get_kv_type(meta, id) == GGUF_TYPE_ARRAY && gguf_get_arr_type(meta, id) == GGUF_TYPE_STRING &&
	    gguf_get_arr_n(meta, id) > 0) {
		*listed = gguf_get_arr_n(meta, id);
		if (w >= 0 && gguf_get_kv_type(meta, w) == GGUF_TYPE_UINT32 && gguf_get_val_u32(meta, w) == ES_PANEL) {
			return meta;
		}
	}
	gguf_free(meta);
	return NULL;
}

struct llama_model *es_model_load(const char *path, struct llama_model_params params, bool q8, long *repacked) {
	es_bf16_packed_here = 0;
	es_panels_taken = 0;
	es_q8_mapped_here = 0;
	size_t listed;
	bool has_q8, has_bf16;
	struct gguf_context *meta = es_panels_of(path, &listed, &has_q8, &has_bf16);
	if (listed > 0 && (meta == NULL || !es_accel_bf16_products())) {
		// panels of another width, or no kernel here that reads them
		if (meta != NULL) {
			gguf_free(meta);
		}
		*repacked = ES_PANELS_UNREADABLE;
		return NULL;
	}
	if (meta != NULL) {
		// mapped, so that the panels are the page cache's (read into memory, they
		// would bypass the buffer's set_tensor unmarked)
		params.use_mmap = true;
	}
	es_load_panels = meta;
	es_load_q8 = q8 && has_q8 && es_bf16_dot && atomic_load(&es_accel_on) && (atomic_load(&es_accel_ops) & ES_ACCEL_OP_Q8);
	// mapped unless BF16 matrices in the file are to be repacked (a panel file's
	// are mapped anyway)
	es_load_mapped = es_load_q8 && params.use_mmap && (meta != NULL || !has_bf16 || !es_accel_bf16_products());
	es_loading_model = true;
	struct llama_model *model = llama_model_load_from_file(path, params);
	es_loading_model = false;
	es_load_panels = NULL;
	es_load_q8 = es_load_mapped = false;
	if (meta != NULL) {
		gguf_free(meta);
	}
	if (model != NULL && (size_t)es_panels_taken != listed) {
		// a named matrix went where no kernel reads panels
		llama_model_free(model);
		*repacked = ES_PANELS_NOT_TAKEN;
		return NULL;
	}
	*repacked = es_bf16_packed_here;
	es_accel_last_q8_mapped = es_q8_mapped_here;
	return model;
}

// es_keep_freed_mapped keeps freed heap memory mapped. llama_free destroys a
// context's backends before its scheduler (llama_context declares sched first),
// and ollama's ggml frees the scheduler by calling each backend's reset through
// the freed backend (its patch "Enable resetting backend devices"): a read of
// freed memory on every llama_free, which this project cannot patch. It faulted
// (SIGSEGV in ggml_backend_sched_free, about one run in five of this package's
// tests after long contexts came to run embed-stack's flash attention) when glibc
// had returned the page to the kernel: with its dynamic mmap threshold, buffers of
// megabytes go into a thread's arena, grow it by 64 MiB heaps, and a heap emptied
// by the context's own frees is unmapped. With the threshold fixed (128 KiB, its
// default start) large buffers are mapped on their own and the arenas hold small
// allocations only, and with the trim threshold raised the main arena's top is not
// given back either; freed memory then stays mapped and the stale read finds the
// backend's table as it was. Only glibc is affected; elsewhere nothing changes.
void es_keep_freed_mapped(void) {
#if defined(__GLIBC__)
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

// ---------------------------------------------------------------------------
// A persistent thread pool for the CPU backend

typedef ggml_threadpool_t (*es_tp_new_fn)(struct ggml_threadpool_params *params);
typedef void (*es_tp_free_fn)(ggml_threadpool_t tp);

static void *es_cpu_proc(const char *name) {
	ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
	if (cpu == NULL) {
		return NULL;
	}
	return ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(cpu), name);
}

struct llama_context *es_init_context(struct llama_model *model, struct llama_context_params params, int kernel_threads,
                                     bool exact_attention, void **kernels, struct es_kv_pages *kv) {
	es_init_threads = kernel_threads;
	es_init_exact = exact_attention;
	es_init_made = NULL;
	es_kv_capture(kv);
	struct llama_context *ctx = llama_init_from_model(model, params);
	es_kv_capture(NULL);
	*kernels = ctx != NULL ? es_init_made : NULL;
	es_init_threads = 0;
	es_init_exact = false;
	es_init_made = NULL;
	return ctx;
}

void es_kernels_alone(void *kernels, bool alone) {
	struct es_backend_ctx *ctx = kernels;
	atomic_store(&ctx->pool.linger, alone);
}

void *es_threadpool_attach(struct llama_context *ctx, int n_threads) {
	es_tp_new_fn tp_new = (es_tp_new_fn)es_cpu_proc("ggml_threadpool_new");
	if (tp_new == NULL || n_threads < 2) {
		return NULL;
	}
	struct ggml_threadpool_params params = ggml_threadpool_params_default(n_threads);
	// No polling: between two graphs (and while this file's device computes its
	// part of one) the threads sleep instead of spinning on the cores it needs.
	params.poll = 0;
	ggml_threadpool_t tp = tp_new(&params);
	if (tp != NULL) {
		llama_attach_threadpool(ctx, tp, tp);
	}
	return tp;
}

void es_threadpool_free(struct llama_context *ctx, void *tp) {
	if (tp == NULL) {
		return;
	}
	llama_detach_threadpool(ctx);
	es_tp_free_fn tp_free = (es_tp_free_fn)es_cpu_proc("ggml_threadpool_free");
	if (tp_free != NULL) {
		tp_free(tp);
	}
}

// rate.c: how fast this core runs AVX512_BF16's dot product (vdpbf16ps) against
// float32 FMAs (vfmadd231ps), both on 512-bit vectors: throughput with 16
// independent accumulators, and latency along one chain. embed-stack's BF16
// kernels (backends/llama/accel.c) pick dot products or FMAs over widened BF16
// values by which does more arithmetic per second; this program is how that was
// measured (docs/performance.md). Run it with `make bf16-rate` on an idle host.
//
// A vdpbf16ps does 64 floating-point operations (16 lanes, two products and two
// sums each), an FMA 32.
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define TARGET __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"), noinline))
// distinct starting values, so that the compiler cannot merge the chains
#define ACCS                                                                                                    \
	__m512 a[16];                                                                                              \
	for (int i = 0; i < 16; i++)                                                                               \
		a[i] = _mm512_set1_ps((float)i);
#define SUM                                                                                                     \
	__m512 s = a[0];                                                                                           \
	for (int i = 1; i < 16; i++)                                                                               \
		s = _mm512_add_ps(s, a[i]);                                                                            \
	return _mm512_reduce_add_ps(s);

TARGET static float dot_throughput(long n) {
	ACCS
	__m512bh x = (__m512bh)_mm512_set1_epi32(0x3c003c00), y = x;
	for (long i = 0; i < n; i++) {
		__asm__ volatile("" : "+v"(x), "+v"(y));
#pragma GCC unroll 16
		for (int r = 0; r < 16; r++)
			a[r] = _mm512_dpbf16_ps(a[r], x, y);
	}
	SUM
}

TARGET static float fma_throughput(long n) {
	ACCS
	__m512 x = _mm512_set1_ps(1e-9f), y = x;
	for (long i = 0; i < n; i++) {
		__asm__ volatile("" : "+v"(x), "+v"(y));
#pragma GCC unroll 16
		for (int r = 0; r < 16; r++)
			a[r] = _mm512_fmadd_ps(x, y, a[r]);
	}
	SUM
}

TARGET static float dot_latency(long n) {
	__m512 a = _mm512_set1_ps(1);
	__m512bh x = (__m512bh)_mm512_set1_epi32(0x3c003c00);
	for (long i = 0; i < n; i++)
		a = _mm512_dpbf16_ps(a, x, x);
	return _mm512_reduce_add_ps(a);
}

TARGET static float fma_latency(long n) {
	__m512 a = _mm512_set1_ps(1), x = _mm512_set1_ps(1e-9f);
	for (long i = 0; i < n; i++)
		a = _mm512_fmadd_ps(a, x, x);
	return _mm512_reduce_add_ps(a);
}

int main(void) {
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) {
		printf("this CPU lacks AVX-512F with AVX512_BF16: nothing to measure\n");
		return 0;
	}
	const long n = 30000000;
	float sink = 0;
	for (int round = 1; round <= 3; round++) {
		double t = now();
		sink += dot_throughput(n);
		double dot = now() - t;
		t = now();
		sink += fma_throughput(n);
		double fma = now() - t;
		t = now();
		sink += dot_latency(4 * n);
		double dotl = now() - t;
		t = now();
		sink += fma_latency(4 * n);
		double fmal = now() - t;
		printf("round %d, one thread: vdpbf16ps %.0f GFLOP/s (%.2f G/s), FMA %.0f GFLOP/s (%.2f G/s): dot/FMA %.2f; "
		       "latency vdpbf16ps %.2f ns, FMA %.2f ns\n",
		       round, 16.0 * n * 64 / dot / 1e9, 16.0 * n / dot / 1e9, 16.0 * n * 32 / fma / 1e9, 16.0 * n / fma / 1e9,
		       (16.0 * n * 64 / dot) / (16.0 * n * 32 / fma), dotl / (4.0 * n) * 1e9, fmal / (4.0 * n) * 1e9);
	}
	return sink == 12345.0f; // keeps the results live
}

package llama

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/reference"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/weights"
)

// accelKernels are the kernel sets this CPU can run: the AVX-512 ones where it has
// AVX-512F, and the AVX2 ones, which every such CPU runs too.
func accelKernels(t *testing.T) []bool {
	t.Helper()
	var sets []bool
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		sets = append(sets, true)
	}
	if cpu.X86.HasAVX512F {
		sets = append(sets, false)
	}
	if len(sets) == 0 {
		t.Skip("this CPU has neither AVX-512F nor AVX2 with FMA: embed-stack's kernels are not registered")
	}
	return sets
}

func kernelName(avx2 bool) string {
	if avx2 {
		return "avx2"
	}
	return "avx512"
}

// TestAccelMulMat holds embed-stack's attention-score kernel to a float64 product
// of the same inputs, over shapes that exercise every edge of its tiles: key counts
// not a multiple of the vector width (1 to 70), query counts not a multiple of the
// row tile, head sizes from 1 to 128, grouped K heads broadcast over Q's, and
// one to three threads.
func TestAccelMulMat(t *testing.T) {
	shapes := []accelProduct{
		{Dim: 32, KTokens: 128, QTokens: 128, Heads: 12, KVHeads: 12}, // all-MiniLM-L6-v2
		{Dim: 64, KTokens: 70, QTokens: 9, Heads: 4, KVHeads: 4},
		{Dim: 128, KTokens: 33, QTokens: 17, Heads: 8, KVHeads: 2}, // grouped K heads
		{Dim: 8, KTokens: 8, QTokens: 8, Heads: 2, KVHeads: 1},
		{Dim: 24, KTokens: 47, QTokens: 31, Heads: 3, KVHeads: 1},
		{Dim: 16, KTokens: 16, QTokens: 100, Heads: 2, KVHeads: 2},
		{Dim: 40, KTokens: 15, QTokens: 8, Heads: 5, KVHeads: 5},
	}
	for _, avx2 := range accelKernels(t) {
		for i, p := range shapes {
			for _, threads := range []int{1, 2, 3} {
				got, want, ok := accelMulMat(p, threads, avx2, uint64(1000+i))
				if !ok {
					t.Fatalf("%s %+v: refused; want computed", kernelName(avx2), p)
				}
				worst := 0.0
				for j := range want {
					// Sums of Dim products of values in [-1, 1): float32 rounding
					// stays far below 1e-6 per unit of Dim.
					err := math.Abs(float64(got[j])-want[j]) / float64(p.Dim)
					worst = max(worst, err)
				}
				if worst > 1e-6 {
					t.Errorf("%s %+v, %d threads: error %.3g per unit of the head size; want <= 1e-6", kernelName(avx2), p, threads, worst)
				}
			}
		}
	}
}

// TestAccelWeightMulMat holds the product with an F32 weight matrix (packed into
// panels of 32 columns) to a float64 product of the same inputs: row counts not a
// multiple of the panel width (the last panel zero-padded), token counts not a
// multiple of the row tile, one to three threads, and (at three) the weights packed
// as the product goes instead of once.
func TestAccelWeightMulMat(t *testing.T) {
	for _, avx2 := range accelKernels(t) {
		for i, s := range []struct{ k, n, m int }{{384, 1536, 128}, {1536, 384, 33}, {384, 384, 1}, {16, 16, 7}, {100, 70, 19}, {64, 200, 512}} {
			for _, threads := range []int{1, 2, 3} {
				unpacked := threads == 3 // past the packed copies' budget
				got, want, ok := accelWeightMulMat(s.k, s.n, s.m, threads, avx2, unpacked, uint64(7+i))
				if !ok {
					t.Fatalf("%s %+v: refused; want computed", kernelName(avx2), s)
				}
				worst := 0.0
				for j := range want {
					worst = max(worst, math.Abs(float64(got[j])-want[j])/float64(s.k))
				}
				if worst > 1e-6 {
					t.Errorf("%s k=%d n=%d m=%d, %d threads: error %.3g per unit of k; want <= 1e-6", kernelName(avx2), s.k, s.n, s.m, threads, worst)
				}
			}
		}
	}
}

// TestAccelMulMatRefuses checks that the device leaves to ggml what its matrix
// kernels already do well: a product of activations whose second operand is
// contiguous (the products with weights it takes are those of a model's weight
// buffer, which a plain tensor is not).
func TestAccelMulMatRefuses(t *testing.T) {
	accelKernels(t)
	p := accelProduct{Dim: 32, KTokens: 64, QTokens: 64, Heads: 2, KVHeads: 2, Contiguous: true}
	if _, _, ok := accelMulMat(p, 1, false, 1); ok {
		t.Fatalf("%+v: computed; want refused (ggml's matrix kernels take contiguous operands)", p)
	}
}

// TestAccelGELU holds embed-stack's GELU to the tanh approximation ggml_gelu
// defines, computed in float64, over [-12, 12] (past ggml's own cut-offs at ±10)
// and rows whose width is not a multiple of the vector width.
func TestAccelGELU(t *testing.T) {
	const width = 37
	xs := make([]float32, width*200)
	for i := range xs {
		xs[i] = -12 + 24*float32(i)/float32(len(xs)-1)
	}
	xs[0], xs[1], xs[2] = 0, -1e-7, 1e-7
	for _, avx2 := range accelKernels(t) {
		for _, threads := range []int{1, 2} {
			got, ok := accelGELU(xs, width, threads, avx2)
			if !ok {
				t.Fatalf("%s: refused; want computed", kernelName(avx2))
			}
			worst, at := 0.0, 0
			for i, x := range xs {
				v := float64(x)
				want := 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*v*(1+0.044715*v*v)))
				if err := math.Abs(float64(got[i])-want) / (1 + math.Abs(v)); err > worst {
					worst, at = err, i
				}
			}
			if worst > 1e-6 {
				t.Errorf("%s, %d threads: GELU(%g) = %g, error %.3g relative to 1+|x|; want <= 1e-6", kernelName(avx2), threads, xs[at], got[at], worst)
			}
		}
	}
}

// TestAccelMiniLM runs the real all-MiniLM-L6-v2 (F32) with embed-stack's kernels
// and without. With them they must take part (the counter of operations they
// computed moves; without, it must not), the reference texts stay within the
// real-weights bar (cosine >= 0.9999 to sentence-transformers), and long inputs,
// which go through the attention-score product the kernels take over (short ones
// are packed into flash attention), keep cosine >= 0.99999 to ggml's own kernels.
func TestAccelMiniLM(t *testing.T) {
	accelKernels(t)
	ref, want := readMiniLMReference(t)
	// Long inputs: the reference's token ids run together into 40 to 512 tokens.
	var long [][]int32
	cls, sep := ref.IDs[0][0], ref.IDs[0][len(ref.IDs[0])-1]
	var body []int32
	for _, ids := range ref.IDs {
		body = append(body, ids[1:len(ids)-1]...)
	}
	for _, n := range []int{40, 97, 128, 200, 511} {
		long = append(long, append(append([]int32{cls}, body[:n-2]...), sep))
	}
	embed := func(mode string) (short, longVecs [][]float32, ops int64, device string) {
		e := openModel(t, minilmF32Model, Config{Threads: 2, CPUAccel: mode})
		before := accelComputed()
		var err error
		if short, err = e.Embed(context.Background(), ref.IDs); err != nil {
			t.Fatal(err)
		}
		if longVecs, err = e.Embed(context.Background(), long); err != nil {
			t.Fatal(err)
		}
		return short, longVecs, accelComputed() - before, e.Info().Device.CPUAccel
	}
	t.Cleanup(func() { setupAccel(backends.CPUAccelAuto) })
	onShort, onLong, onOps, onDevice := embed(backends.CPUAccelAuto)
	offShort, offLong, offOps, offDevice := embed(backends.CPUAccelOff)
	if !strings.HasPrefix(onDevice, "embed-stack kernels (") || offDevice != "" {
		t.Errorf("Device.CPUAccel = %q with auto, %q with off; want embed-stack kernels (...) and none", onDevice, offDevice)
	}
	// Per long input and layer (6): the attention scores, GELU and the six
	// products with weight matrices (Q, K, V, output, up, down).
	if onOps < int64(len(long))*6*8 || offOps != 0 {
		t.Errorf("operations computed by embed-stack's kernels: %d with auto, %d with off; want >= %d and 0", onOps, offOps, len(long)*6*8)
	}
	lowest, at := holdToReference(t, "with embed-stack's kernels", onShort, want, ref, 0.9999)
	t.Logf("reference texts: lowest cosine %.7f (text %d) with embed-stack's kernels", lowest, at)
	holdToReference(t, "without", offShort, want, ref, 0.9999)
	for i := range long {
		if c := cosine32(onLong[i], offLong[i]); c < 0.99999 {
			t.Errorf("input of %d tokens: cosine %.7f between embed-stack's kernels and ggml's; want >= 0.99999", len(long[i]), c)
		} else {
			t.Logf("input of %d tokens: cosine %.8f between embed-stack's kernels and ggml's", len(long[i]), c)
		}
	}
}

// bf16Kernels skips a test on a CPU whose kernels have no BF16 product: AVX-512F
// with AVX512_BF16 (Zen 4 and 5, Sapphire Rapids and later) is what they need.
func bf16Kernels(t *testing.T) {
	t.Helper()
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512BF16 {
		t.Skip("this CPU lacks AVX-512F with AVX512_BF16: embed-stack's BF16 products are not used here (the build and the other kernels' tests still ran)")
	}
}

// bf16Label is the kernels' description on a CPU with AVX512_BF16: AMX named where
// the CPU has AMX-TILE and AMX-BF16 and EMBED_STACK_AMX does not turn them off.
func bf16Label() string {
	if amx := testenv.Get("EMBED_STACK_AMX"); cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 && amx != "off" && amx != "0" {
		return "embed-stack kernels (AVX-512, BF16, AMX)"
	}
	return "embed-stack kernels (AVX-512, BF16)"
}

// TestAccelBF16MulMat holds the product with a BF16 weight matrix to the exact
// product of the same BF16 values (X rounded to BF16 as the kernels round it), over
// every edge of the kernels' tiles: row counts not a multiple of the 32-column
// panel (the last zero-padded), token counts not a multiple of the 12-row tile
// (1 to 128), K from 32 to 3072, a 3-D second operand, one to three threads, the
// matrix repacked as llama.cpp's loader stores it (and read back unchanged) or
// packed per product, in both arithmetics (BF16 dot products and float32 FMAs).
// With the AVX2 kernels forced it must not be computed at all.
func TestAccelBF16MulMat(t *testing.T) {
	bf16Kernels(t)
	t.Cleanup(func() { setupAccel(backends.CPUAccelAuto) })
	setupAccel(backends.CPUAccelAuto)
	shapes := []struct {
		k, n, m int
		batched bool
	}{{1024, 3072, 128, false}, {3072, 1024, 33, false}, {64, 40, 1, false}, {32, 16, 13, false}, {1024, 1000, 12, false}, {96, 70, 25, false}, {64, 50, 20, false}, {128, 64, 30, true}}
	t.Cleanup(func() { accelBF16FMA(-1); accelBF16AMX(-1) })
	// Both arithmetics on any CPU with AVX512_BF16: the BF16 dot products (AMD's
	// choice) and float32 FMAs (Intel's); and AMX tiles for every product where the
	// CPU has them (Intel's from Sapphire Rapids on), none where it does not.
	amx := cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16
	if got := accelBF16AMX(1); got != boolInt(amx) {
		t.Fatalf("accelBF16AMX(1) reports %d on a CPU with AMX-BF16 %v; want %d", got, amx, boolInt(amx))
	}
	type arithmetic struct {
		fma bool
		amx int
	}
	arithmetics := []arithmetic{{false, 0}, {true, 0}}
	if amx {
		arithmetics = append(arithmetics, arithmetic{false, 1})
	}
	for _, ar := range arithmetics {
		fma := ar.fma
		if got := accelBF16FMA(boolInt(fma)); got != fma {
			t.Fatalf("accelBF16FMA(%v) reports %v", fma, got)
		}
		if got := accelBF16AMX(ar.amx); got != ar.amx {
			t.Fatalf("accelBF16AMX(%d) reports %d", ar.amx, got)
		}
		for i, s := range shapes {
			// threads 1 and 2 from W repacked at load, 3 packed per product; and
			// W in Q8_0 (always packed per product, es_q8_pack) on 1 and 3
			for _, run := range []struct {
				threads    int
				packed, q8 bool
			}{{1, true, false}, {2, true, false}, {3, false, false}, {1, false, true}, {3, false, true}} {
				got, want, rc := accelBF16MulMat(s.k, s.n, s.m, run.threads, run.packed, s.batched, run.q8, uint64(11+i))
				if rc != 0 {
					t.Fatalf("k=%d n=%d m=%d packed=%v Q8_0=%v: es_accel_test_bf16 = %d; want 0 (-1 refused, -2 read back different, -3 not repacked)", s.k, s.n, s.m, run.packed, run.q8, rc)
				}
				worst := 0.0
				for j := range want {
					worst = max(worst, math.Abs(float64(got[j])-want[j])/float64(s.k))
				}
				if !(worst <= 1e-6) { // NaN fails too
					t.Errorf("k=%d n=%d m=%d batched=%v, FMAs %v, AMX %d, %d threads, packed=%v, Q8_0=%v: error %.3g per unit of k; want <= 1e-6", s.k, s.n, s.m, s.batched, fma, ar.amx, run.threads, run.packed, run.q8, worst)
				}
			}
		}
	}
	accelBF16FMA(-1)
	accelBF16AMX(-1)
}

// TestAccelBF16MulMatNoDot: the kernels of the CPUs without AVX512_BF16, the AVX2
// ones (es_bf16_fma256_rows, forced here where the CPU has AVX-512 too) and the
// AVX-512 ones run as on Skylake-SP to Ice Lake (the FMA form, the activations
// rounded by es_bf16_convert256), hold the product with a BF16 weight matrix to the
// exact one as the AVX512_BF16 kernels do, over the same edges, and where the CPU
// has AVX512_BF16 they give the bits of its FMA form: the same FMAs in the same
// order. Q8_0 matrices stay with ggml there (their conversion to panels is
// AVX512_BF16 code).
func TestAccelBF16MulMatNoDot(t *testing.T) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		t.Skip("no AVX2 and FMA: embed-stack's kernels are not registered")
	}
	t.Cleanup(func() { accelBF16FMA(-1); accelBF16AMX(-1); setupAccel(backends.CPUAccelAuto) })
	shapes := []struct {
		k, n, m int
		batched bool
	}{{1024, 3072, 128, false}, {3072, 1024, 33, false}, {64, 40, 1, false}, {32, 16, 13, false}, {1024, 1000, 12, false}, {96, 70, 25, false}, {64, 50, 20, false}, {128, 64, 30, true}}
	runs := []struct {
		threads int
		packed  bool
	}{{1, true}, {2, true}, {3, false}}
	type key struct{ shape, run int }
	fmaGot := map[key][]float32{}
	compare := cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16
	if compare {
		setupAccel(backends.CPUAccelAuto)
		accelBF16AMX(0)
		accelBF16FMA(1)
		for i, s := range shapes {
			for j, run := range runs {
				got, _, rc := accelBF16MulMat(s.k, s.n, s.m, run.threads, run.packed, s.batched, false, uint64(11+i))
				if rc != 0 {
					t.Fatalf("AVX-512 FMA form, k=%d n=%d m=%d: es_accel_test_bf16 = %d", s.k, s.n, s.m, rc)
				}
				fmaGot[key{i, j}] = got
			}
		}
		accelBF16FMA(-1)
		accelBF16AMX(-1)
	}
	// The AVX2 kernels, and where the CPU has AVX-512 its kernels as a CPU without
	// AVX512_BF16 runs them (the FMA form, the activations rounded by the AVX2
	// conversion): the same bits again.
	kernels := []string{backends.CPUAccelAVX2}
	if compare {
		kernels = append(kernels, backends.CPUAccelAVX512)
	}
	t.Cleanup(func() { accelBF16Dot(-1) })
	for _, set := range kernels {
		accelBF16Dot(-boolInt(set == backends.CPUAccelAVX2)) // 0: AVX-512 as without AVX512_BF16
		setupAccel(set)
		for i, s := range shapes {
			for j, run := range runs {
				got, want, rc := accelBF16MulMat(s.k, s.n, s.m, run.threads, run.packed, s.batched, false, uint64(11+i))
				if rc != 0 {
					t.Fatalf("%s kernels, k=%d n=%d m=%d packed=%v: es_accel_test_bf16 = %d; want 0", set, s.k, s.n, s.m, run.packed, rc)
				}
				worst, differ := 0.0, 0
				for x := range want {
					worst = max(worst, math.Abs(float64(got[x])-want[x])/float64(s.k))
					if compare && math.Float32bits(got[x]) != math.Float32bits(fmaGot[key{i, j}][x]) {
						differ++
					}
				}
				if !(worst <= 1e-6) || differ != 0 {
					t.Errorf("%s kernels without AVX512_BF16, k=%d n=%d m=%d batched=%v, %d threads, packed=%v: error %.3g per unit of k (want <= 1e-6), %d of %d outputs differ from the AVX-512 FMA form's bits (want none)",
						set, s.k, s.n, s.m, s.batched, run.threads, run.packed, worst, differ, len(want))
				}
			}
		}
		if _, _, rc := accelBF16MulMat(64, 32, 4, 1, false, false, true, 1); rc != -1 {
			t.Errorf("%s kernels without AVX512_BF16: es_accel_test_bf16 of a Q8_0 matrix = %d; want -1 (Q8_0 stays with ggml)", set, rc)
		}
	}
}

// TestAccelFlashAttention holds embed-stack's flash attention over a BF16 KV cache
// to the float64 reference of the same BF16 values, and to ggml's own CPU kernel
// given the same operation, over the edges of its tiles: query counts not a
// multiple of the 32-query tile, cell counts not a multiple of the 32-cell block,
// blocks hidden from every query (skipped), from some (masked), grouped KV heads
// (GQA) and one to three threads. And the cells a query does not see change
// nothing of its output, bit for bit (what makes a long sequence's vector a
// function of the sequence alone).
func TestAccelFlashAttention(t *testing.T) {
	bf16Kernels(t)
	t.Cleanup(func() { setupAccel(backends.CPUAccelAuto) })
	setupAccel(backends.CPUAccelAuto)
	cases := []accelAttention{
		{Dim: 128, Cells: 300, QTokens: 77, Heads: 4, KVHeads: 2, Hidden: 40},
		{Dim: 128, Cells: 512, QTokens: 256, Heads: 2, KVHeads: 1},
		{Dim: 64, Cells: 33, QTokens: 1, Heads: 3, KVHeads: 3, Hidden: 0},
		{Dim: 16, Cells: 200, QTokens: 100, Heads: 4, KVHeads: 2, Hidden: 3},
		{Dim: 80, Cells: 70, QTokens: 70, Heads: 2, KVHeads: 1},
		{Dim: 256, Cells: 96, QTokens: 64, Heads: 2, KVHeads: 2, Hidden: 64},
	}
	t.Cleanup(func() { accelBF16FMA(-1) })
	// Both arithmetics on any CPU with AVX512_BF16: the BF16 dot products (the
	// choice on AMD's CPUs) and float32 FMAs (on Intel's), and the exact form
	// (two passes of FMAs) that a context packing sequences uses.
	for _, mode := range []struct{ fma, exact bool }{{false, false}, {true, false}, {false, true}} {
		fma := mode.fma
		if got := accelBF16FMA(boolInt(fma)); got != fma {
			t.Fatalf("accelBF16FMA(%v) reports %v", fma, got)
		}
		for i, c := range cases {
			c.Exact = mode.exact
			for _, threads := range []int{1, 2, 3} {
				got, ggml, want, ok := accelFlashAttn(c, threads, uint64(5+i))
				if !ok {
					t.Fatalf("%v: es_accel_test_flash_attn refused it; want it computed", c)
				}
				var toRef, toGGML float64
				for j := range want {
					toRef = max(toRef, math.Abs(float64(got[j])-want[j]))
					toGGML = max(toGGML, math.Abs(float64(got[j])-float64(ggml[j])))
				}
				if !(toRef <= 1e-5 && toGGML <= 1e-5) { // NaN fails too
					t.Errorf("%v, FMAs %v, exact %v, %d threads: largest error %.3g to the float64 reference, %.3g to ggml's kernel; want <= 1e-5 (V is in [-1, 1))", c, fma, mode.exact, threads, toRef, toGGML)
				} else if threads == 2 {
					t.Logf("%v, FMAs %v, exact %v: largest error %.3g to the float64 reference, %.3g to ggml's kernel", c, fma, mode.exact, toRef, toGGML)
				}
			}
		}
		c := cases[0]
		c.Exact = mode.exact
		plain, _, _, _ := accelFlashAttn(c, 2, 3)
		c.Noise = 99
		noisy, _, _, _ := accelFlashAttn(c, 2, 3)
		if d := maxAbsDiff(plain, noisy); d != 0 {
			t.Errorf("%v, FMAs %v, exact %v: the hidden cells' K and V drawn again moved the outputs by %.3g; want bit-identical", c, fma, mode.exact, d)
		}
	}
	// The exact form: the same cells placed behind more hidden ones (a sequence
	// packed behind others) give the same bits, at every offset within a block of
	// 32 cells and past it. The one-pass kernels' running maximum moves with the
	// blocks' bounds; packed in a model's call that moved a vector by 3e-3.
	for _, c := range []accelAttention{cases[0], cases[3], {Dim: 128, Cells: 40, QTokens: 40, Heads: 2, KVHeads: 1}} {
		c.Exact = true
		want, _, _, _ := accelFlashAttn(c, 2, 11)
		for _, shift := range []int{1, 5, 31, 33, 100} {
			moved := c
			moved.Cells += shift
			moved.Hidden += shift
			got, _, _, _ := accelFlashAttn(moved, 2, 11)
			if d := maxAbsDiff(got, want); d != 0 {
				t.Errorf("%v, exact: behind %d more hidden cells the outputs moved by %.3g; want bit-identical", c, shift, d)
			}
		}
	}
	if got, want := accelBF16FMA(-1), cpuvariant.ReadHost().Vendor == cpuvariant.VendorIntel; got != want {
		t.Errorf("flash attention's CPU choice: FMAs %v; want %v (FMAs on Intel's CPUs only)", got, want)
	}
	setupAccel(backends.CPUAccelAVX2)
	if _, _, _, ok := accelFlashAttn(cases[0], 1, 1); ok {
		t.Errorf("with the AVX2 kernels forced: flash attention was computed; want it refused (no BF16 dot products without AVX-512)")
	}
}

// TestAccelLongF16Model: a model whose weights stay F16 (Intel's default, and
// --weights file anywhere) still has its long sequences' attention computed by
// embed-stack's flash attention, one operation per layer and decode call. Until
// the device named the CPU's buffer type outside model loads, ggml's scheduler
// never moved that operation here without a repacked BF16 weight beside it, and
// ggml's own kernel ran over the BF16 cache one query at a time (1.6 times
// slower than the plain kernel). The vectors stay within cosine 0.9999 of the
// plain kernel's over an F16 cache (--cpu-accel off), for a 129-token sequence
// (the shortest the long context takes) and a 700-token one (three calls).
func TestAccelLongF16Model(t *testing.T) {
	bf16Kernels(t)
	t.Cleanup(func() { setupAccel(backends.CPUAccelAuto) })
	on := openTiny(t, Config{ContextTokens: 1024, Threads: 2, CPUAccel: backends.CPUAccelAuto})
	if on.long == nil || on.long.kernel != attnFlashBF16 {
		t.Fatalf("long context %+v; want embed-stack's flash attention (attnFlashBF16)", on.long)
	}
	vocab := on.Info().NVocab
	seqs := [][]int32{randomSeq(41, FlashMaxTokens+1, vocab), randomSeq(42, 700, vocab)}
	before := accelComputed()
	got, err := on.Embed(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	ops := accelComputed() - before
	shape, err := gguf.ReadShape(modelFile(t, tinyModel))
	if err != nil {
		t.Fatal(err)
	}
	layers := int64(shape.Layers)
	calls := int64(1 + (700+LongCallTokens-1)/LongCallTokens)
	if ops < layers*calls {
		t.Errorf("embed-stack's kernels computed %d operations for %d decode calls of a %d-layer model; want >= %d (its flash attention in every layer)", ops, calls, layers, layers*calls)
	}
	off := openTiny(t, Config{ContextTokens: 1024, Threads: 2, CPUAccel: backends.CPUAccelOff})
	want, err := off.Embed(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		if c := cosine32(got[i], want[i]); !(c >= 0.9999) {
			t.Errorf("%d tokens: cosine %.7f between embed-stack's flash attention and the plain kernel; want >= 0.9999", len(seqs[i]), c)
		} else {
			t.Logf("%d tokens: cosine %.8f between embed-stack's flash attention and the plain kernel", len(seqs[i]), c)
		}
	}
}

// TestAccelSkipsLMHead holds what the engine gets from a decoder whose LM head
// (llama.cpp's "result_output" product, over the whole vocabulary) embed-stack's
// kernels leave uncomputed, as they do by default, to what it gets with the head
// computed: the same vectors bit for bit, for the tiny Qwen3 from its F16 file
// (the head read from ggml's buffer) and converted to BF16 (from the device's),
// sequences of 1 to 300 tokens; and the kernels must have skipped a head in every
// call with it on and none with it off.
func TestAccelSkipsLMHead(t *testing.T) {
	accelKernels(t)
	t.Cleanup(func() { accelOnlyOps(accelOpAll) })
	models := []string{modelFile(t, tinyModel)}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		res := weights.Load(context.Background(), weights.Request{Source: models[0], Mode: weights.BF16, CacheDir: t.TempDir()}, slog.New(slog.DiscardHandler))
		if !res.Converted() {
			t.Fatalf("weights.Load gave %+v; want BF16 converted", res)
		}
		models = append(models, res.Path)
	}
	for _, path := range models {
		embed := func(ops int) (vecs [][]float32, skipped int64) {
			t.Helper()
			accelOnlyOps(ops)
			e, err := Open(Config{ModelPath: path, Threads: 2, CPUAccel: backends.CPUAccelAuto})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			vocab := e.Info().NVocab
			seqs := [][]int32{randomSeq(71, 16, vocab), randomSeq(72, 300, vocab), randomSeq(73, 1, vocab)}
			before := accelSkippedHeads()
			for _, s := range seqs { // a call each
				v, err := e.Embed(context.Background(), [][]int32{s})
				if err != nil {
					t.Fatal(err)
				}
				vecs = append(vecs, v[0])
			}
			return vecs, accelSkippedHeads() - before
		}
		skipped, n := embed(accelOpAll)
		computed, m := embed(accelOpAll &^ accelOpHead)
		if n < 3 || m != 0 {
			t.Errorf("%s: the kernels skipped %d LM heads in 3 calls with the head theirs, %d with it not; want >= 3 and 0", filepath.Base(path), n, m)
		}
		for i := range skipped {
			if !slices.Equal(skipped[i], computed[i]) {
				t.Errorf("%s: sequence %d: vectors differ with the LM head skipped (max |diff| %g); want the same bits", filepath.Base(path), i, maxAbsDiff(skipped[i], computed[i]))
			}
		}
	}
}

// TestAccelPoolJobs runs a million small jobs through the kernels' thread pool, task
// counts alternating between few and many as a forward's operations do, with its
// workers sleeping between jobs and lingering: no task may run outside the job
// being run. Until job g's task count had a place of its own, a worker that read
// gen g while the caller wrote job g + 1's could claim a task past g's end on
// g + 1's count and run it after its caller had returned: a SIGSEGV in es_fa_tile
// one bench run in three. With that bug back this test failed two runs in three
// (1 to 7 stray tasks in a million jobs); it takes about 12 s.
func TestAccelPoolJobs(t *testing.T) {
	jobs := 1_000_000
	if testing.Short() {
		jobs = 100_000
	}
	for _, linger := range []bool{false, true} {
		for _, threads := range []int{2, 3} {
			if stray := accelPoolStray(threads, jobs, linger); stray != 0 {
				t.Errorf("%d threads, lingering %v: %d tasks of %d jobs ran outside their job; want none", threads, linger, stray, jobs)
			}
		}
	}
}

// TestOnePoolShortCalls: where the kernels hold a decoder's matrices and compute
// its attention (a Q8_0 file on a CPU with AVX512_BF16), a query's call runs as one
// pool and a batch's calls as two (setPools), switching back and forth within one
// context, and a text's vector is the same bits either way.
func TestOnePoolShortCalls(t *testing.T) {
	bf16Kernels(t)
	q8 := filepath.Join(t.TempDir(), "tiny-q8_0.gguf")
	if err := gguf.QuantizeQ8_0(modelFile(t, tinyModel), q8); err != nil {
		t.Fatal(err)
	}
	e, err := Open(Config{ModelPath: q8, Threads: 2, CPUAccel: backends.CPUAccelAuto})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.short.kernel != attnFlashBF16 || !e.kernelsAlone(e.short.kernel) {
		t.Fatalf("short context: kernel %v, kernels alone %v; want the kernels' flash attention (heldShort) and one pool for short calls", e.short.kernel, e.kernelsAlone(e.short.kernel))
	}
	vocab := e.Info().NVocab
	query := randomSeq(71, 17, vocab)
	batch := [][]int32{query}
	for i := range 7 {
		batch = append(batch, randomSeq(uint64(80+i), 100, vocab))
	}
	first := embedOne(t, e, query)
	if e.short.kernels == nil || !e.short.alone {
		t.Fatalf("after a 17-token call: kernels %v, one pool %v; want one pool", e.short.kernels != nil, e.short.alone)
	}
	got, err := e.Embed(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if e.short.alone {
		t.Errorf("after a call of %d tokens: one pool; want two (more than %d tokens)", 17+7*100, onePoolTokens)
	}
	again := embedOne(t, e, query)
	if !e.short.alone {
		t.Errorf("after the 17-token call again: two pools; want one")
	}
	if d := maxAbsDiff(got[0], first); d != 0 {
		t.Errorf("the query in a batch of two pools: max |diff| %.3g to it alone in one pool; want the same bits", d)
	}
	if d := maxAbsDiff(again, first); d != 0 {
		t.Errorf("the query alone again: max |diff| %.3g; want the same bits", d)
	}
}

// TestAccelBF16Model serves models converted to BF16 at load (weights.Load, as
// serve's --weights bf16 does) with embed-stack's BF16 products and without them
// (the same process, the kernels' other operations on in both): with them the
// model's matrices must be repacked at load and the products computed by the
// kernels (seven per Qwen3 layer, six per BERT layer, each call), and the vectors
// must stay within cosine 0.99999 of ggml's own BF16 kernels for the real
// all-MiniLM-L6-v2 (an encoder), 0.99997 for the tiny Qwen3 (a decoder, whose
// short sequences' attention changes too; see below), 1 to 500 tokens.
func TestAccelBF16Model(t *testing.T) {
	// The AVX-512 kernels where the CPU has AVX512_BF16, and the AVX2 ones (what a
	// CPU without AVX-512 runs: their products in 256-bit FMAs, the attention
	// ggml's) wherever it has AVX2 and FMA.
	type run struct {
		name, mode, label string
		dot               int // accelBF16Dot's: 0 to run as a CPU without AVX512_BF16
	}
	var runs []run
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		runs = append(runs, run{"avx512bf16", backends.CPUAccelAuto, bf16Label(), -1})
	}
	if cpu.X86.HasAVX512F {
		// as on Skylake-SP to Ice Lake: the products in AVX-512 FMAs, the attention ggml's
		runs = append(runs, run{"avx512", backends.CPUAccelAVX512, "embed-stack kernels (AVX-512, BF16 in FMAs)", 0})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		runs = append(runs, run{"avx2", backends.CPUAccelAVX2, "embed-stack kernels (AVX2, BF16)", -1})
	}
	if len(runs) == 0 {
		t.Skip("this CPU has neither AVX-512F nor AVX2 with FMA: embed-stack's kernels are not registered")
	}
	t.Cleanup(func() { accelOnlyOps(accelOpAll); accelBF16Dot(-1); setupAccel(backends.CPUAccelAuto) })
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			accelBF16Dot(r.dot)
			testAccelBF16Model(t, r.mode, r.label, r.dot == 0)
		})
	}
}

func testAccelBF16Model(t *testing.T, mode, label string, noDot bool) {
	for _, m := range []struct {
		rel    string
		perLay int   // BF16 products per layer
		first  int32 // a token every sequence starts with ([CLS] for BERT), or -1
	}{{tinyModel, 7, -1}, {minilmF32Model, 6, 101}} {
		res := weights.Load(context.Background(), weights.Request{Source: encoderModel(t, m.rel), Mode: weights.BF16, CacheDir: t.TempDir()}, slog.New(slog.DiscardHandler))
		if !res.Converted() || res.Type != "BF16" {
			t.Fatalf("%s: weights.Load gave %+v; want BF16 converted", m.rel, res)
		}
		open := func(ops int) *Engine {
			accelOnlyOps(ops)
			e, err := Open(Config{ModelPath: res.Path, Threads: 2, CPUAccel: mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		}
		on, off := open(accelOpAll), open(accelOpAll&^accelOpBF16)
		if !on.accelWeights || off.accelWeights {
			t.Fatalf("%s: kernels hold the weights: %v with BF16 products, %v without; want true and false", m.rel, on.accelWeights, off.accelWeights)
		}
		if noDot && !accelBF16FMA(-1) {
			t.Fatalf("%s: run as a CPU without AVX512_BF16, the kernels multiply with its dot products", m.rel)
		}
		if d, want := on.Info().Device.CPUAccel, label; d != want {
			t.Errorf("%s: Device.CPUAccel = %q; want %s", m.rel, d, want)
		}
		vocab := int32(on.Info().NVocab)
		var seqs [][]int32
		rng := uint64(5)
		for _, n := range []int{1, 2, 17, 64, 130, 500} {
			seq := make([]int32, n)
			for i := range seq {
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				seq[i] = int32(1000 + rng%uint64(vocab-1000))
			}
			if m.first >= 0 {
				seq[0] = m.first
			}
			seqs = append(seqs, seq)
		}
		before := accelComputed()
		got, err := on.Embed(context.Background(), seqs)
		if err != nil {
			t.Fatal(err)
		}
		ops := accelComputed() - before
		want, err := off.Embed(context.Background(), seqs)
		if err != nil {
			t.Fatal(err)
		}
		shape, err := readShape(res.Path)
		if err != nil {
			t.Fatal(err)
		}
		layers := shape.Layers
		if ops < int64(layers*m.perLay) {
			t.Errorf("%s: embed-stack's kernels computed %d operations for %d sequences; want >= %d (the BF16 products of one call)", m.rel, ops, len(seqs), layers*m.perLay)
		}
		// A decoder's short sequences get the kernels' flash attention too where
		// they hold the weights (heldShort), over a BF16 K cache where ggml's
		// kernel reads an F16 one: the products alone agree within 1e-7 (the one
		// sequence and the 130-token one, whose attention is the kernels' in
		// both), the K cache's rounding moved the others by up to 1.1e-5 (0.9999898
		// at 2 tokens). So the decoder's vectors are held to the float64 reference
		// as well: the project's 0.9999, and no more than 1e-5 below ggml's.
		bar := 0.99999
		var ref *reference.Model
		if m.first < 0 {
			bar = 0.99997
			if ref, err = reference.Load(res.Path); err != nil {
				t.Fatal(err)
			}
		}
		for i := range seqs {
			c := cosine32(got[i], want[i])
			t.Logf("%s: %d tokens: cosine %.8f between embed-stack's BF16 products and ggml's", m.rel, len(seqs[i]), c)
			if !(c >= bar) {
				t.Errorf("%s: %d tokens: cosine %.8f between embed-stack's BF16 products and ggml's; want >= %g", m.rel, len(seqs[i]), c, bar)
			}
			if ref == nil {
				continue
			}
			r, err := ref.LastToken(seqs[i])
			if err != nil {
				t.Fatal(err)
			}
			cOn, cOff := cosine(got[i], r), cosine(want[i], r)
			t.Logf("%s: %d tokens: cosine to the float64 reference %.9f (ggml's: %.9f)", m.rel, len(seqs[i]), cOn, cOff)
			if !(cOn >= 0.9999 && cOn >= cOff-1e-5) {
				t.Errorf("%s: %d tokens: cosine %.9f to the float64 reference, ggml's %.9f; want >= 0.9999 and no more than 1e-5 below ggml's", m.rel, len(seqs[i]), cOn, cOff)
			}
		}
	}
}

// TestAccelBF16Panels loads copies converted to BF16 with the layers' matrices
// already in the kernels' panel layout (weights.Load for a device whose kernels
// multiply BF16, as serve converts on such a CPU), which a worker maps instead of
// repacking: the tiny Qwen3 and the real all-MiniLM-L6-v2 give vectors
// bit-identical to the plain BF16 copy's, whose matrices are repacked at load (the
// same kernels on the same panels), 1 to 500 tokens. With the kernels off, such a
// file is refused naming the layout, and a file naming as panels a matrix the
// kernels do not take (the token embedding, read by rows) is refused too, never
// read as rows.
func TestAccelBF16Panels(t *testing.T) {
	bf16Kernels(t)
	t.Cleanup(func() { setupAccel(backends.CPUAccelAuto) })
	esk := func() (*backends.Device, error) {
		return &backends.Device{Name: "CPU", CPUAccel: "embed-stack kernels (AVX-512, BF16)", CPUAccelBF16: true}, nil
	}
	for _, rel := range []string{tinyModel, minilmF32Model} {
		src := encoderModel(t, rel)
		plain := weights.Load(context.Background(), weights.Request{Source: src, Mode: weights.BF16, CacheDir: t.TempDir()}, slog.New(slog.DiscardHandler))
		panels := weights.Load(context.Background(), weights.Request{Source: src, Mode: weights.BF16, Device: esk, CacheDir: t.TempDir()}, slog.New(slog.DiscardHandler))
		if !strings.HasSuffix(panels.Path, "-esk32.gguf") || strings.Contains(plain.Path, "esk32") {
			t.Fatalf("%s: copies %s and %s; want the second for the kernels' layout", rel, plain.Path, panels.Path)
		}
		setupAccel(backends.CPUAccelAuto)
		open := func(path string) *Engine {
			e, err := Open(Config{ModelPath: path, Threads: 2, CPUAccel: backends.CPUAccelAuto})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		}
		pe, re := open(panels.Path), open(plain.Path)
		if !pe.accelWeights || !re.accelWeights {
			t.Fatalf("%s: kernels hold the weights: %v mapped, %v repacked; want both", rel, pe.accelWeights, re.accelWeights)
		}
		vocab := int32(pe.Info().NVocab)
		var seqs [][]int32
		for _, n := range []int{1, 2, 17, 64, 130, 500} {
			seq := make([]int32, n)
			for i := range seq {
				seq[i] = int32(1000 + (i*7919+n*104729)%int(vocab-1000))
			}
			seqs = append(seqs, seq)
		}
		got, err := pe.Embed(context.Background(), seqs)
		if err != nil {
			t.Fatal(err)
		}
		want, err := re.Embed(context.Background(), seqs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			for j := range got[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("%s: %d tokens: value %d is %g from the mapped panels, %g repacked at load; want them bit-identical", rel, len(seqs[i]), j, got[i][j], want[i][j])
				}
			}
		}

		_, err = Open(Config{ModelPath: panels.Path, Threads: 2, CPUAccel: backends.CPUAccelOff})
		if err == nil || !strings.Contains(err.Error(), "holds BF16 matrices in embed-stack's panel layout") || !strings.Contains(err.Error(), "no kernel of this worker reads") {
			t.Errorf("%s: the panel copy with --cpu-accel off: %v; want it refused, naming the layout", rel, err)
		}
		setupAccel(backends.CPUAccelAuto)
	}

	// A file naming the token embedding (a GET_ROWS operand, kept by the CPU
	// backend) as panels.
	plain := weights.Load(context.Background(), weights.Request{Source: encoderModel(t, tinyModel), Mode: weights.BF16, CacheDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	f, err := gguf.Open(plain.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bad := filepath.Join(t.TempDir(), "bad-panels.gguf")
	if _, err := f.ConvertWith(bad, gguf.ConvertOptions{To: gguf.TypeBF16, Convert: func(gguf.TensorInfo) bool { return false },
		KVs: []gguf.KV{{Key: "embed_stack.bf16_panels", Value: []string{"token_embd.weight"}}, {Key: "embed_stack.bf16_panel_width", Value: uint32(32)}}}); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{ModelPath: bad, Threads: 2, CPUAccel: backends.CPUAccelAuto})
	if err == nil || !strings.Contains(err.Error(), "did not take all of them") {
		t.Errorf("a file naming the token embedding as panels: %v; want it refused", err)
	}
}

// TestAccelQ8Products serves a Q8_0 file (the tiny Qwen3 quantised as llama.cpp's
// Q8_0 files are) with embed-stack's Q8_0 products and without them. Where the CPU
// has AVX512_BF16 the kernels must hold the matrices mapped from the file (no
// copy) and compute every product of every call, however few its rows (all seven a
// layer; the last layer's feed-forward three have the call's outputs as rows): the
// vectors must be within cosine 0.9999 of the float64 forward pass over the Q8_0
// values and no further from it than ggml's (which rounds the activations to int8
// too), and bit-identical when the same sequences are packed into one call, the
// short ones with the long (a vector must not depend on its company). Elsewhere the
// kernels must take none of it, and ggml's products must hold the same packing to
// the same bits (within 1e-5 on ARM, as TestPackingInvariance). TestAccelBF16MulMat
// holds the products themselves to the exact product.
func TestAccelQ8Products(t *testing.T) {
	accelKernels(t)
	t.Cleanup(func() { accelOnlyOps(accelOpAll) })
	q8 := filepath.Join(t.TempDir(), "tiny-q8_0.gguf")
	if err := gguf.QuantizeQ8_0(modelFile(t, tinyModel), q8); err != nil {
		t.Fatal(err)
	}
	ref, err := reference.Load(q8)
	if err != nil {
		t.Fatal(err)
	}
	bf16 := cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16
	open := func(ops int) *Engine {
		t.Helper()
		accelOnlyOps(ops)
		e, err := Open(Config{ModelPath: q8, Threads: 2, CPUAccel: backends.CPUAccelAuto})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	on := open(accelOpAll)
	mapped := accelQ8Mapped()
	off := open(accelOpAll &^ accelOpQ8)
	layers := ref.Config().Layers
	if !bf16 {
		if on.accelWeights || mapped != 0 {
			t.Fatalf("no AVX512_BF16: the kernels hold the Q8_0 weights (%v, %d mapped); want none", on.accelWeights, mapped)
		}
	} else if !on.accelWeights || off.accelWeights || mapped != 7*layers {
		t.Fatalf("the kernels hold the Q8_0 weights: %v with their Q8_0 products (%d matrices mapped), %v without; want true (%d mapped) and false", on.accelWeights, mapped, off.accelWeights, 7*layers)
	}
	vocab := on.Info().NVocab
	lengths := []int{1, 17, 63, 64, 130, 500}
	seqs := make([][]int32, len(lengths))
	alone := make([][]float32, len(lengths))
	for i, n := range lengths {
		seq := randomSeq(uint64(90+i), n, vocab)
		seqs[i] = seq
		embed := func(e *Engine) []float32 {
			t.Helper()
			v, err := e.Embed(context.Background(), [][]int32{seq})
			if err != nil {
				t.Fatal(err)
			}
			return v[0]
		}
		before := accelQ8Products()
		got := embed(on)
		alone[i] = got
		products := accelQ8Products() - before
		ggml := embed(off)
		want, err := ref.LastToken(seq)
		if err != nil {
			t.Fatal(err)
		}
		c, cg := cosine(got, want), cosine(ggml, want)
		t.Logf("%d tokens: %d Q8_0 products in the kernels, cosine %.9f to the float64 reference (ggml's Q8_0 products %.9f)", n, products, c, cg)
		switch {
		case bf16 && products < int64(7*layers):
			t.Errorf("%d tokens: the kernels computed %d Q8_0 products; want at least %d (7 a layer)", n, products, 7*layers)
		case !bf16 && products != 0:
			t.Errorf("%d tokens: the kernels computed %d Q8_0 products; want none (no AVX512_BF16)", n, products)
		case bf16 && !(c >= 0.9999 && c >= cg-1e-6):
			t.Errorf("%d tokens: cosine %.9f to the float64 reference, ggml's Q8_0 products %.9f; want >= 0.9999 and no lower than ggml's", n, c, cg)
		case !bf16 && !slices.Equal(got, ggml):
			t.Errorf("%d tokens: vectors differ from ggml's Q8_0 products (max |diff| %g); want the same bits", n, maxAbsDiff(got, ggml))
		}
	}
	// The same sequences in one call of 775 rows: each vector as it was alone.
	accelOnlyOps(accelOpAll)
	packed, err := Open(Config{ModelPath: q8, Threads: 2, CPUAccel: backends.CPUAccelAuto, ContextTokens: 2048, BatchTokens: 2048, MaxSeqs: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer packed.Close()
	got, err := packed.Embed(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	// ggml's Q8_0 products (no AVX512_BF16) are the same bits too on x86 (measured
	// on Zen 5 with the kernels' Q8_0 products off); on ARM ggml switches kernels
	// at 8 rows, as TestPackingInvariance allows.
	tol := 0.0
	if !bf16 && runtime.GOARCH != "amd64" {
		tol = 1e-5
	}
	for i, n := range lengths {
		if d := maxAbsDiff(got[i], alone[i]); d > tol || tol == 0 && !slices.Equal(got[i], alone[i]) {
			t.Errorf("%d tokens packed with the others: max |diff| %g to the vector alone; want at most %g", n, d, tol)
		}
	}
}

// TestAccelBF16Convert: the AVX2 kernels round activations to BF16 as AVX512_BF16's
// VCVTNE2PS2BF16 does (to nearest even, input denormals as zero, NaN quiet), so their
// products are the FMA form's bits: against that rule written out here, and against
// the instruction where the CPU has it, on ties, denormals, infinities, NaNs, random
// values and every tail length.
func TestAccelBF16Convert(t *testing.T) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		t.Skip("no AVX2 and FMA")
	}
	round := func(f float32) uint16 {
		u := math.Float32bits(f)
		switch {
		case f != f:
			return uint16(u>>16) | 0x40
		case u&0x7F800000 == 0:
			return uint16((u & 0x80000000) >> 16)
		}
		return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
	}
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.00390625, 1.01171875, // ties: 0x3F808000 (even stays), 0x3F818000 (odd goes up)
		math.Float32frombits(0x3F808000), math.Float32frombits(0x3F818000), math.Float32frombits(0x3F80FFFF),
		math.Float32frombits(0x00000001), math.Float32frombits(0x807FFFFF), math.Float32frombits(0x00800000), // denormals, the smallest normal
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0x7F800001), math.Float32frombits(0xFFC00000),
		math.MaxFloat32, -math.MaxFloat32, math.Float32frombits(0x7F7FFFFF)}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		xs = append(xs, math.Float32frombits(r.Uint32()), float32(r.NormFloat64()))
	}
	_, dot := accelBF16Convert([]float32{1, 2}, false)
	for n := 0; n <= len(xs); n += 2 {
		if n > 40 && n < len(xs)-2 {
			n = len(xs) - 2 // every tail length on the short ones, then the whole set
		}
		got, ok := accelBF16Convert(xs[:n], true)
		if !ok {
			t.Fatal("es_accel_test_bf16_convert refused the AVX2 conversion")
		}
		var want []uint32
		if dot {
			want, _ = accelBF16Convert(xs[:n], false)
		}
		for i := range got {
			rule := uint32(round(xs[2*i])) | uint32(round(xs[2*i+1]))<<16
			if got[i] != rule || (dot && got[i] != want[i]) {
				t.Fatalf("n=%d, pair %d (%#08x, %#08x): AVX2 %#08x, the rule %#08x, AVX512_BF16 %#08x (checked: %v)", n, i,
					math.Float32bits(xs[2*i]), math.Float32bits(xs[2*i+1]), got[i], rule, want, dot)
			}
		}
	}
}

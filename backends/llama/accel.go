package llama

/*
#include "accel.h"
#include "ggml-cpu.h"
*/
import "C"

import (
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/gguf"
)

// setupAccel registers embed-stack's own CPU kernels (accel.c) with ggml, or turns
// them off, as Config.CPUAccel says (checked by backends.CheckCPUAccel), and returns
// what computes with them, for backends.Device: CPUAccel, "" when off or when this
// CPU can run none of them, and CPUAccelBF16. Only an engine on the CPU calls it:
// on a GPU the scheduler would never pick them.
func setupAccel(mode string) (label string, bf16 bool) {
	isa := C.int(C.ES_ACCEL_ISA_AUTO)
	switch mode {
	case backends.CPUAccelOff:
		C.es_accel_set_enabled(false)
		return "", false
	case backends.CPUAccelAVX512:
		isa = C.ES_ACCEL_ISA_AVX512
	case backends.CPUAccelAVX2:
		isa = C.ES_ACCEL_ISA_AVX2
	}
	d := C.es_accel_register(isa)
	if d == nil {
		return "", false
	}
	C.es_accel_set_enabled(true)
	return C.GoString(d), bool(C.es_accel_bf16_products())
}

// accelFlashBF16 says whether embed-stack's kernels compute flash attention over a
// BF16 KV cache (es_accel_bf16_attention) for the contexts created from now on, for
// a model of this shape.
func accelFlashBF16(s gguf.Shape) bool {
	return bool(C.es_accel_bf16_attention(C.int64_t(s.KeyLength), C.int64_t(s.ValueLength)))
}

// accelComputed counts the operations embed-stack's own kernels computed in this
// process, for tests that check they ran.
func accelComputed() int64 {
	return int64(C.es_accel_computed_ops())
}

// accelProduct is one product for the kernels' tests, shaped as an encoder's
// attention scores: kq = mul_mat(K, Q) over heads, K and Q permuted views of
// [dim, heads, tokens] tensors (so Q, the second operand, is not contiguous), K
// with kvHeads heads broadcast over Q's heads.
type accelProduct struct {
	Dim, KTokens, QTokens, Heads, KVHeads int
	// Contiguous makes Q a contiguous tensor instead, which the device refuses.
	Contiguous bool
}

// accelMulMat computes p with embed-stack's kernels (the AVX2 ones when avx2 is
// set) on threads threads, from random inputs drawn from seed, and returns the
// result, [head][q][k] flattened, beside its float64 reference. ok is false when
// the device refuses the product.
func accelMulMat(p accelProduct, threads int, avx2 bool, seed uint64) (got []float32, want []float64, ok bool) {
	ctx := C.ggml_init(C.struct_ggml_init_params{mem_size: C.size_t(64<<20 + 16*(p.Dim*(p.KTokens*p.KVHeads+p.QTokens*p.Heads)+p.KTokens*p.QTokens*p.Heads))})
	defer C.ggml_free(ctx)
	kc := C.ggml_new_tensor_3d(ctx, C.GGML_TYPE_F32, C.int64_t(p.Dim), C.int64_t(p.KVHeads), C.int64_t(p.KTokens))
	k := C.ggml_permute(ctx, kc, 0, 2, 1, 3)
	var q, qc *C.struct_ggml_tensor
	if p.Contiguous {
		qc = C.ggml_new_tensor_3d(ctx, C.GGML_TYPE_F32, C.int64_t(p.Dim), C.int64_t(p.QTokens), C.int64_t(p.Heads))
		q = qc
	} else {
		qc = C.ggml_new_tensor_3d(ctx, C.GGML_TYPE_F32, C.int64_t(p.Dim), C.int64_t(p.Heads), C.int64_t(p.QTokens))
		q = C.ggml_permute(ctx, qc, 0, 2, 1, 3)
	}
	kq := C.ggml_mul_mat(ctx, k, q)
	kd := unsafe.Slice((*float32)(kc.data), p.Dim*p.KVHeads*p.KTokens)
	qd := unsafe.Slice((*float32)(qc.data), p.Dim*p.Heads*p.QTokens)
	rng := seed
	next := func() float32 { // xorshift: the same inputs for a seed on every host
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return float32(int64(rng>>40)-(1<<23)) / (1 << 23)
	}
	for i := range kd {
		kd[i] = next()
	}
	for i := range qd {
		qd[i] = next()
	}
	if C.es_accel_test_compute(kq, C.int(threads), C.int(boolInt(avx2))) != 0 {
		return nil, nil, false
	}
	out := unsafe.Slice((*float32)(kq.data), p.KTokens*p.QTokens*p.Heads)
	got = append([]float32(nil), out...)
	want = make([]float64, len(got))
	for h := range p.Heads {
		kh := h / (p.Heads / p.KVHeads)
		for t := range p.QTokens {
			for j := range p.KTokens {
				var s float64
				for d := range p.Dim {
					kv := kd[(j*p.KVHeads+kh)*p.Dim+d]
					var qv float32
					if p.Contiguous {
						qv = qd[(h*p.QTokens+t)*p.Dim+d]
					} else {
						qv = qd[(t*p.Heads+h)*p.Dim+d]
					}
					s += float64(kv) * float64(qv)
				}
				want[(h*p.QTokens+t)*p.KTokens+j] = s
			}
		}
	}
	return got, want, true
}

// accelWeightMulMat computes a product with a weight matrix of n rows of k floats,
// y = mul_mat(W, X) for m rows of X, with embed-stack's kernels (the AVX2 ones when
// avx2 is set) on threads threads, from random inputs drawn from seed, and returns
// it, [m][n] flattened, beside its float64 reference. With unpacked set the
// weights are packed as the product goes (the path past the packed copies' budget).
func accelWeightMulMat(k, n, m, threads int, avx2, unpacked bool, seed uint64) (got []float32, want []float64, ok bool) {
	if unpacked {
		C.es_accel_set_packed_budget(0)
		defer C.es_accel_set_packed_budget(2 << 30)
	}
	ctx := C.ggml_init(C.struct_ggml_init_params{mem_size: C.size_t(1<<20 + 16*(k*n+k*m+n*m))})
	defer C.ggml_free(ctx)
	w := C.ggml_new_tensor_2d(ctx, C.GGML_TYPE_F32, C.int64_t(k), C.int64_t(n))
	x := C.ggml_new_tensor_2d(ctx, C.GGML_TYPE_F32, C.int64_t(k), C.int64_t(m))
	y := C.ggml_mul_mat(ctx, w, x)
	wd := unsafe.Slice((*float32)(w.data), k*n)
	xd := unsafe.Slice((*float32)(x.data), k*m)
	next := unitRand(seed)
	for _, s := range [][]float32{wd, xd} {
		for i := range s {
			s[i] = next()
		}
	}
	if C.es_accel_test_compute(y, C.int(threads), C.int(boolInt(avx2))) != 0 {
		return nil, nil, false
	}
	got = append([]float32(nil), unsafe.Slice((*float32)(y.data), n*m)...)
	want = productRef(k, n, m, func(i int) float64 { return float64(wd[i]) }, func(i int) float64 { return float64(xd[i]) })
	return got, want, true
}

// unitRand returns a generator of values in [-1, 1) drawn from seed (xorshift).
func unitRand(seed uint64) func() float32 {
	rng := seed
	return func() float32 {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return float32(int64(rng>>40)-(1<<23)) / (1 << 23)
	}
}

// productRef is the float64 product y[r][c] = sum_i w[c*k+i] x[r*k+i], [m][n]
// flattened.
func productRef(k, n, m int, w, x func(int) float64) []float64 {
	want := make([]float64, n*m)
	for r := range m {
		for c := range n {
			var s float64
			for i := range k {
				s += w(c*k+i) * x(r*k+i)
			}
			want[r*n+c] = s
		}
	}
	return want
}

// accelGELU computes GELU (ggml_gelu, the tanh approximation) of xs with
// embed-stack's kernels, in rows of width values.
func accelGELU(xs []float32, width, threads int, avx2 bool) ([]float32, bool) {
	ctx := C.ggml_init(C.struct_ggml_init_params{mem_size: C.size_t(1<<20 + 16*len(xs))})
	defer C.ggml_free(ctx)
	x := C.ggml_new_tensor_2d(ctx, C.GGML_TYPE_F32, C.int64_t(width), C.int64_t(len(xs)/width))
	copy(unsafe.Slice((*float32)(x.data), len(xs)), xs)
	y := C.ggml_gelu(ctx, x)
	if C.es_accel_test_compute(y, C.int(threads), C.int(boolInt(avx2))) != 0 {
		return nil, false
	}
	return append([]float32(nil), unsafe.Slice((*float32)(y.data), len(xs))...), true
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// bf16 rounds f to bfloat16 (to nearest, ties to even, as the kernels and ggml
// convert), returned as its bits.
func bf16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

func bf16Float(h uint16) float64 {
	return float64(math.Float32frombits(uint32(h) << 16))
}

// accelBF16MulMat computes y = mul_mat(W, X) for a BF16 weight matrix of n rows of
// k values (Q8_0 with q8, quantised from the same draws as ggml quantises) and m
// rows of F32 X (as batches of 3 rows when batched, X being 3-D) with embed-stack's
// BF16 kernels on threads threads, from random inputs drawn from seed, and returns
// it, [m][n] flattened, beside its float64 reference: the exact product of the BF16
// weights (a Q8_0 block's values d x q rounded to BF16) and X rounded to BF16,
// which is what the kernels are asked to compute. packed stores W first as
// llama.cpp's loader stores a weight, repacked (see es_accel_test_bf16). rc is
// es_accel_test_bf16's.
func accelBF16MulMat(k, n, m, threads int, packed, batched, q8 bool, seed uint64) (got []float32, want []float64, rc int) {
	ctx := C.ggml_init(C.struct_ggml_init_params{mem_size: C.size_t(1<<20 + 16*(k*n+k*m+n*m))})
	defer C.ggml_free(ctx)
	typ := uint32(C.GGML_TYPE_BF16)
	if q8 {
		typ = C.GGML_TYPE_Q8_0
	}
	w := C.ggml_new_tensor_2d(ctx, typ, C.int64_t(k), C.int64_t(n))
	var x *C.struct_ggml_tensor
	if batched {
		x = C.ggml_new_tensor_3d(ctx, C.GGML_TYPE_F32, C.int64_t(k), 3, C.int64_t(m/3))
	} else {
		x = C.ggml_new_tensor_2d(ctx, C.GGML_TYPE_F32, C.int64_t(k), C.int64_t(m))
	}
	y := C.ggml_mul_mat(ctx, w, x)
	xd := unsafe.Slice((*float32)(x.data), k*m)
	next := unitRand(seed)
	wv := make([]float64, k*n) // the weights' values, as the kernels read them
	if q8 {
		draws := make([]float32, k*n)
		for i := range draws {
			draws[i] = next()
		}
		blocks, err := gguf.AppendEncoded(nil, gguf.TypeQ8_0, draws)
		if err != nil || len(blocks) != int(C.ggml_nbytes(w)) {
			panic(fmt.Sprintf("quantising to Q8_0: %d bytes, %v", len(blocks), err))
		}
		copy(unsafe.Slice((*byte)(w.data), len(blocks)), blocks)
		values, err := gguf.Decode(gguf.TypeQ8_0, blocks)
		if err != nil {
			panic(err)
		}
		for i, v := range values {
			wv[i] = bf16Float(bf16(float32(v))) // d x q is exact in float32
		}
	} else {
		wd := unsafe.Slice((*uint16)(w.data), k*n)
		for i := range wd {
			wd[i] = bf16(next())
			wv[i] = bf16Float(wd[i])
		}
	}
	for i := range xd {
		xd[i] = next()
	}
	rc = int(C.es_accel_test_bf16(y, C.int(threads), C.int(boolInt(packed))))
	if rc != 0 {
		return nil, nil, rc
	}
	got = append([]float32(nil), unsafe.Slice((*float32)(y.data), n*m)...)
	want = productRef(k, n, m, func(i int) float64 { return wv[i] }, func(i int) float64 { return bf16Float(bf16(xd[i])) })
	return got, want, 0
}

// accelOnlyOps limits embed-stack's kernels to the operations ops names
// (accelOpKQ, ...: ES_ACCEL_OP_*), for tests that hold one path against another in
// one process; accelOpAll restores them.
func accelOnlyOps(ops int) { C.es_accel_set_ops(C.int(ops)) }

// accelBF16FMA forces the arithmetic of embed-stack's BF16 operations (products
// with BF16 weights, flash attention): float32 FMAs (1), BF16 dot products (0), or
// the CPU's choice (-1); it reports the arithmetic now in use (true: FMAs). For
// tests and measurements.
func accelBF16FMA(mode int) bool {
	C.es_accel_set_bf16_fma(C.int(mode))
	return bool(C.es_accel_bf16_fma())
}

// accelBF16Dot(0) has the next setupAccel treat the CPU as one without
// AVX512_BF16, as Skylake-SP to Ice Lake are (BF16 products in FMAs, nothing else
// of the AVX512_BF16 kernels); -1 restores detection. For tests and measurements.
func accelBF16Dot(mode int) { C.es_accel_set_bf16_dot(C.int(mode)) }

// accelBF16AMX forces the use of AMX tiles in embed-stack's products with BF16
// weights: 0 none, 1 every product, -1 the default; it reports the use now in force
// (0 where the CPU or the OS lacks AMX).
// For tests and measurements.
func accelBF16AMX(mode int) int {
	C.es_accel_set_bf16_amx(C.int(mode))
	return int(C.es_accel_bf16_amx())
}

// accelSkippedHeads counts the LM heads embed-stack's kernels left uncomputed in
// this process (ES_ACCEL_OP_HEAD), for the test that checks they did.
func accelSkippedHeads() int64 {
	return int64(C.es_accel_skipped_heads())
}

// accelQ8Products counts the products with Q8_0 matrices embed-stack's kernels
// computed in this process (ES_ACCEL_OP_Q8), and accelQ8Mapped how many Q8_0
// matrices the last model loaded left mapped from its file in their buffer: for the
// tests that check those products ran there, from no copy of the weights.
func accelQ8Products() int64 { return int64(C.es_accel_q8_products()) }
func accelQ8Mapped() int     { return int(C.es_accel_q8_mapped()) }

const (
	accelOpBF16 = int(C.ES_ACCEL_OP_BF16)
	accelOpHead = int(C.ES_ACCEL_OP_HEAD)
	accelOpQ8   = int(C.ES_ACCEL_OP_Q8)
	accelOpAll  = int(C.ES_ACCEL_OP_ALL)
)

// accelAttention is one flash-attention operation for the kernel's tests, shaped as
// a decoder's long context asks for it: Q a permuted view of [Dim, Heads, QTokens]
// floats, K and V BF16 caches of Cells rows of KVHeads x Dim values viewed per
// head, and an F16 mask that hides the cells before Hidden from every query (as
// another sequence's) and is causal after it: query t sees the cells from Hidden up
// to Cells-QTokens+t. A non-zero Noise draws the hidden cells' K and V again from
// it, after everything else.
type accelAttention struct {
	Dim, Cells, QTokens, Heads, KVHeads, Hidden int
	// Noise draws the hidden cells' K and V from this seed instead; the visible
	// cells' are drawn in order whatever Hidden is, so the same visible cells can
	// be placed behind more hidden ones.
	Noise uint64
	// Exact computes the kernel's exact form (es_init_context).
	Exact bool
	// Timed, when set, makes accelFlashAttn time Runs more runs of embed-stack's
	// kernel instead of computing the others, and write their mean.
	Timed *struct {
		Runs    int
		Seconds float64
	}
}

// String names the operation in the tests' messages.
func (a accelAttention) String() string {
	return fmt.Sprintf("%d queries x %d heads (%d KV heads) of %d over %d cells, %d hidden", a.QTokens, a.Heads, a.KVHeads, a.Dim, a.Cells, a.Hidden)
}

// accelPoolStray runs jobs small jobs on the kernels' thread pool of threads
// threads and returns the tasks that ran outside their job (es_accel_test_pool).
func accelPoolStray(threads, jobs int, linger bool) int64 {
	return int64(C.es_accel_test_pool(C.int(threads), C.int(jobs), C.bool(linger)))
}

// accelFlashAttn computes a with embed-stack's kernel on threads threads (got) and
// with ggml's CPU kernel (ggml), from random inputs drawn from seed, beside the
// float64 reference of what both are asked: softmax(Q.K / sqrt(Dim)) V over the
// cells each query sees (zero for a query that sees none), with Q rounded to BF16
// as both round it. Each is
// [QTokens][Heads][Dim] flattened. ok is false when the device refuses a.
func accelFlashAttn(a accelAttention, threads int, seed uint64) (got, ggml []float32, want []float64, ok bool) {
	qn, kn := a.Dim*a.Heads*a.QTokens, a.Dim*a.KVHeads*a.Cells
	ctx := C.ggml_init(C.struct_ggml_init_params{mem_size: C.size_t(64<<20 + 8*(qn+2*kn+a.Cells*a.QTokens) + 64*a.Cells*threads*a.Heads)})
	defer C.ggml_free(ctx)
	qc := C.ggml_new_tensor_3d(ctx, C.GGML_TYPE_F32, C.int64_t(a.Dim), C.int64_t(a.Heads), C.int64_t(a.QTokens))
	kc := C.ggml_new_tensor_3d(ctx, C.GGML_TYPE_BF16, C.int64_t(a.Dim), C.int64_t(a.KVHeads), C.int64_t(a.Cells))
	vc := C.ggml_new_tensor_3d(ctx, C.GGML_TYPE_BF16, C.int64_t(a.Dim), C.int64_t(a.KVHeads), C.int64_t(a.Cells))
	mask := C.ggml_new_tensor_2d(ctx, C.GGML_TYPE_F16, C.int64_t(a.Cells), C.int64_t(a.QTokens))
	scale := 1 / math.Sqrt(float64(a.Dim))
	out := C.ggml_flash_attn_ext(ctx, C.ggml_permute(ctx, qc, 0, 2, 1, 3), C.ggml_permute(ctx, kc, 0, 2, 1, 3),
		C.ggml_permute(ctx, vc, 0, 2, 1, 3), mask, C.float(scale), 0, 0)
	qd := unsafe.Slice((*float32)(qc.data), qn)
	kd := unsafe.Slice((*uint16)(kc.data), kn)
	vd := unsafe.Slice((*uint16)(vc.data), kn)
	md := unsafe.Slice((*uint16)(mask.data), a.Cells*a.QTokens)
	next := unitRand(seed)
	for i := range qd {
		qd[i] = 2 * next()
	}
	hidden := unitRand(seed + 1<<32)
	if a.Noise != 0 {
		hidden = unitRand(a.Noise)
	}
	for i := range kd {
		draw := next
		if i < a.Hidden*a.KVHeads*a.Dim {
			draw = hidden
		}
		kd[i], vd[i] = bf16(2*draw()), bf16(draw())
	}
	first := a.Cells - a.QTokens
	seen := func(t, j int) bool { return j >= a.Hidden && j <= first+t }
	for t := range a.QTokens {
		for j := range a.Cells {
			md[t*a.Cells+j] = 0xFC00 // -inf
			if seen(t, j) {
				md[t*a.Cells+j] = 0
			}
		}
	}
	if C.es_accel_test_flash_attn(out, C.int(threads), C.bool(a.Exact)) != 0 {
		return nil, nil, nil, false
	}
	if a.Timed != nil {
		start := time.Now()
		for range a.Timed.Runs {
			C.es_accel_test_flash_attn(out, C.int(threads), C.bool(a.Exact))
		}
		a.Timed.Seconds = time.Since(start).Seconds() / float64(a.Timed.Runs)
		return nil, nil, nil, true
	}
	res := unsafe.Slice((*float32)(out.data), qn)
	got = append([]float32(nil), res...)
	gf := C.ggml_new_graph(ctx)
	C.ggml_build_forward_expand(gf, out)
	C.ggml_graph_compute_with_ctx(ctx, gf, C.int(threads))
	ggml = append([]float32(nil), res...)

	want = make([]float64, qn)
	scores := make([]float64, a.Cells)
	for t := range a.QTokens {
		for h := range a.Heads {
			kh := h / (a.Heads / a.KVHeads)
			top := math.Inf(-1)
			for j := range a.Cells {
				if !seen(t, j) {
					continue
				}
				var s float64
				for d := range a.Dim {
					s += bf16Float(bf16(qd[(t*a.Heads+h)*a.Dim+d])) * bf16Float(kd[(j*a.KVHeads+kh)*a.Dim+d])
				}
				scores[j] = s * scale
				top = max(top, scores[j])
			}
			o := want[(t*a.Heads+h)*a.Dim:][:a.Dim]
			var sum float64
			for j := range a.Cells {
				if !seen(t, j) {
					continue
				}
				p := math.Exp(scores[j] - top)
				sum += p
				for d := range a.Dim {
					o[d] += p * bf16Float(vd[(j*a.KVHeads+kh)*a.Dim+d])
				}
			}
			for d := range o {
				if sum > 0 { // a query that sees no cell gets zeros, as from both kernels
					o[d] /= sum
				}
			}
		}
	}
	return got, ggml, want, true
}

// accelBF16Convert rounds xs (an even count) to BF16 pairs with the AVX2 kernels'
// conversion (avx2) or AVX512_BF16's; ok is false where the CPU lacks it.
func accelBF16Convert(xs []float32, avx2 bool) (pairs []uint32, ok bool) {
	pairs = make([]uint32, len(xs)/2)
	if len(xs) == 0 {
		return pairs, true
	}
	rc := C.es_accel_test_bf16_convert((*C.uint32_t)(unsafe.Pointer(&pairs[0])), (*C.float)(unsafe.Pointer(&xs[0])), C.int64_t(len(xs)), C.int(boolInt(avx2)))
	return pairs, rc == 0
}

package reference

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

// modelSpec describes a model for writeModel: hyperparameters plus a source of
// weights. Tensor values come from weights(name, n); nil gives seeded random values.
type modelSpec struct {
	cfg     Config
	typ     gguf.GGMLType // of the matrices; vectors are F32
	seed    uint64
	weights map[string][]float32
	extraKV map[string]any
	arch    string
	skip    string // a tensor to leave out
	cls     int    // rows of a cls.output.weight head (a reranker's); 0 = none
}

func writeModel(t *testing.T, s modelSpec) string {
	t.Helper()
	c := s.cfg
	w := gguf.NewWriter()
	arch := s.arch
	if arch == "" {
		arch = "qwen3"
	}
	w.AddKV("general.architecture", arch)
	w.AddKV("qwen3.embedding_length", uint32(c.Hidden))
	w.AddKV("qwen3.block_count", uint32(c.Layers))
	w.AddKV("qwen3.feed_forward_length", uint32(c.FFN))
	w.AddKV("qwen3.attention.head_count", uint32(c.Heads))
	w.AddKV("qwen3.attention.head_count_kv", uint32(c.KVHeads))
	w.AddKV("qwen3.attention.key_length", uint32(c.HeadDim))
	w.AddKV("qwen3.attention.value_length", uint32(c.HeadDim))
	w.AddKV("qwen3.rope.freq_base", float32(c.RopeBase))
	w.AddKV("qwen3.attention.layer_norm_rms_epsilon", float32(c.Epsilon))
	for k, v := range s.extraKV {
		w.AddKV(k, v)
	}
	rng := rand.New(rand.NewPCG(s.seed, 7))
	add := func(name string, typ gguf.GGMLType, dims []uint64, mean, std float64) {
		if name == s.skip {
			return
		}
		n := uint64(1)
		for _, d := range dims {
			n *= d
		}
		vals, ok := s.weights[name]
		if !ok {
			vals = make([]float32, n)
			for i := range vals {
				vals[i] = float32(mean + std*rng.NormFloat64())
			}
		}
		if uint64(len(vals)) != n {
			t.Fatalf("test weights for %s: %d values, want %d", name, len(vals), n)
		}
		data, err := gguf.AppendEncoded(nil, typ, vals)
		if err != nil {
			t.Fatal(err)
		}
		w.AddTensor(name, typ, dims, func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		})
	}
	h, q, kv := uint64(c.Hidden), uint64(c.Heads*c.HeadDim), uint64(c.KVHeads*c.HeadDim)
	mat := func(name string, in, out uint64) { add(name, s.typ, []uint64{in, out}, 0, 1/math.Sqrt(float64(in))) }
	vec := func(name string, n uint64) { add(name, gguf.TypeF32, []uint64{n}, 1, 0.1) }
	add("token_embd.weight", s.typ, []uint64{h, uint64(c.Vocab)}, 0, 0.5)
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		vec(p+"attn_norm.weight", h)
		mat(p+"attn_q.weight", h, q)
		mat(p+"attn_k.weight", h, kv)
		mat(p+"attn_v.weight", h, kv)
		mat(p+"attn_output.weight", q, h)
		vec(p+"attn_q_norm.weight", uint64(c.HeadDim))
		vec(p+"attn_k_norm.weight", uint64(c.HeadDim))
		vec(p+"ffn_norm.weight", h)
		mat(p+"ffn_gate.weight", h, uint64(c.FFN))
		mat(p+"ffn_up.weight", h, uint64(c.FFN))
		mat(p+"ffn_down.weight", uint64(c.FFN), h)
	}
	vec("output_norm.weight", h)
	if s.cls > 0 {
		add("cls.output.weight", s.typ, []uint64{h, uint64(s.cls)}, 0, 1/math.Sqrt(float64(h)))
	}
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// smallConfig is a miniature of the real shape: GQA with 2 query heads per KV head,
// several layers, head size 8 (so NEOX and interleaved RoPE differ), Q8_0-compatible
// row lengths.
var smallConfig = Config{Hidden: 32, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, FFN: 64, Vocab: 50, RopeBase: 1e6, Epsilon: 1e-6}

func mustLoad(t *testing.T, path string) *Model {
	t.Helper()
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func maxAbsDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

func cosine(a, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * b[i]
		aa += a[i] * a[i]
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

func TestRopeNeox(t *testing.T) {
	// head size 4, position 1, base 10000: element 0 pairs with 2 and turns by
	// 1*10000^0 = 1 rad; element 1 pairs with 3 and turns by 10000^(-2/4) = 0.01 rad.
	x := []float64{1, 2, 3, 4}
	ropeNeox(x, 1, 10000)
	want := []float64{
		1*math.Cos(1) - 3*math.Sin(1),
		2*math.Cos(0.01) - 4*math.Sin(0.01),
		1*math.Sin(1) + 3*math.Cos(1),
		2*math.Sin(0.01) + 4*math.Cos(0.01),
	}
	if d := maxAbsDiff(x, want); d > 1e-15 {
		t.Fatalf("rope(1,2,3,4 @ pos 1) = %v, want %v (diff %g)", x, want, d)
	}

	// Position 0 is the identity, exactly.
	rng := rand.New(rand.NewPCG(1, 2))
	y := make([]float64, 128)
	for i := range y {
		y[i] = rng.NormFloat64()
	}
	orig := append([]float64(nil), y...)
	ropeNeox(y, 0, 1e6)
	if d := maxAbsDiff(y, orig); d != 0 {
		t.Fatalf("rope at position 0 changed the vector by up to %g", d)
	}

	// A rotation keeps every pair's length; position 3 of 128 dims must not be identity.
	ropeNeox(y, 3, 1e6)
	for i := range 64 {
		before := math.Hypot(orig[i], orig[i+64])
		after := math.Hypot(y[i], y[i+64])
		if math.Abs(before-after) > 1e-12 {
			t.Fatalf("pair %d length %g became %g", i, before, after)
		}
	}
	if maxAbsDiff(y, orig) < 0.1 {
		t.Fatal("rope at position 3 left the vector (almost) unchanged")
	}
}

// TestAttentionGQA pins which KV head each query head reads: with a single position the
// softmax weight is 1, so query head h returns KV head h/(Heads/KVHeads)'s value.
func TestAttentionGQA(t *testing.T) {
	c := Config{Heads: 4, KVHeads: 2, HeadDim: 2}
	q := [][]float64{{1, 2, 3, 4, 5, 6, 7, 8}}
	k := [][]float64{{1, 1, 1, 1}}
	v := [][]float64{{10, 11, 20, 21}}
	got := attention(q, k, v, 0, c)
	want := []float64{10, 11, 10, 11, 20, 21, 20, 21}
	if maxAbsDiff(got[0], want) != 0 {
		t.Fatalf("attention = %v, want %v (heads 0,1 read KV head 0; heads 2,3 KV head 1)", got[0], want)
	}
}

// TestMicroModel checks a one-layer model whose every weight was chosen by hand, against
// the model's equations written out for its 2-dimensional hidden state. The weights are
// asymmetric so that a transposed matrix, a wrong GQA mapping, a missing q/k norm or a
// misplaced eps changes the result.
func TestMicroModel(t *testing.T) {
	cfg := Config{Hidden: 2, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 2, FFN: 1, Vocab: 3, RopeBase: 10000, Epsilon: 0.25}
	// Matrices are stored as rows of their input length (GGUF dims [in, out]).
	weights := map[string][]float32{
		"token_embd.weight":        {1, 0, 0, 2, 3, 4}, // token 0 = (1,0), 1 = (0,2), 2 = (3,4)
		"blk.0.attn_norm.weight":   {1, 0.5},
		"blk.0.attn_q.weight":      {1, 0, 0, 1, 0, 2, 1, 0}, // head 0 = (n0, n1); head 1 = (2 n1, n0)
		"blk.0.attn_k.weight":      {1, 1, 0, 1},             // k = (n0+n1, n1)
		"blk.0.attn_v.weight":      {1, 2, 0, 1},             // v = (n0+2 n1, n1)
		"blk.0.attn_output.weight": {1, 0, 0, 1, 0, 1, 1, 0}, // o = (a0[0]+a1[1], a0[1]+a1[0])
		"blk.0.attn_q_norm.weight": {1, 2},
		"blk.0.attn_k_norm.weight": {0.5, 1},
		"blk.0.ffn_norm.weight":    {1, 1},
		"blk.0.ffn_gate.weight":    {1, 0},   // g = m0
		"blk.0.ffn_up.weight":      {0.5, 1}, // u = 0.5 m0 + m1
		"blk.0.ffn_down.weight":    {1, -1},  // d = (s, -s), s = silu(g) u
		"output_norm.weight":       {2, 0.5},
	}
	m := mustLoad(t, writeModel(t, modelSpec{cfg: cfg, typ: gguf.TypeF32, weights: weights}))
	if got := m.Config(); got != cfg {
		t.Fatalf("Config() = %+v, want %+v", got, cfg)
	}
	embd := [][2]float64{{1, 0}, {0, 2}, {3, 4}}

	norm := func(x [2]float64, w0, w1 float64) [2]float64 {
		r := math.Sqrt((x[0]*x[0]+x[1]*x[1])/2 + 0.25)
		return [2]float64{x[0] / r * w0, x[1] / r * w1}
	}
	rope := func(x [2]float64, pos int) [2]float64 { // head size 2: one pair, angle = pos
		s, c := math.Sincos(float64(pos))
		return [2]float64{x[0]*c - x[1]*s, x[0]*s + x[1]*c}
	}
	hand := func(tokens []int32) [][2]float64 {
		n := len(tokens)
		x := make([][2]float64, n)
		q0, q1, k, v := make([][2]float64, n), make([][2]float64, n), make([][2]float64, n), make([][2]float64, n)
		for p, id := range tokens {
			x[p] = embd[id]
			a := norm(x[p], 1, 0.5)
			q0[p] = rope(norm([2]float64{a[0], a[1]}, 1, 2), p)
			q1[p] = rope(norm([2]float64{2 * a[1], a[0]}, 1, 2), p)
			k[p] = rope(norm([2]float64{a[0] + a[1], a[1]}, 0.5, 1), p)
			v[p] = [2]float64{a[0] + 2*a[1], a[1]}
		}
		attend := func(q [2]float64, p int) [2]float64 {
			var s []float64
			var sum float64
			for j := 0; j <= p; j++ {
				e := math.Exp((q[0]*k[j][0] + q[1]*k[j][1]) / math.Sqrt2)
				s = append(s, e)
				sum += e
			}
			var out [2]float64
			for j := 0; j <= p; j++ {
				out[0] += s[j] / sum * v[j][0]
				out[1] += s[j] / sum * v[j][1]
			}
			return out
		}
		out := make([][2]float64, n)
		for p := range tokens {
			a0, a1 := attend(q0[p], p), attend(q1[p], p)
			h := [2]float64{x[p][0] + a0[0] + a1[1], x[p][1] + a0[1] + a1[0]}
			f := norm(h, 1, 1)
			g, u := f[0], 0.5*f[0]+f[1]
			s := g / (1 + math.Exp(-g)) * u
			out[p] = norm([2]float64{h[0] + s, h[1] - s}, 2, 0.5)
		}
		return out
	}

	for _, tokens := range [][]int32{{0}, {2}, {2, 1}, {1, 0, 2}, {2, 2, 0, 1, 1}} {
		t.Run(fmt.Sprint(tokens), func(t *testing.T) {
			want := hand(tokens)
			got, err := m.Hidden(tokens)
			if err != nil {
				t.Fatal(err)
			}
			for p := range want {
				if d := maxAbsDiff(got[p], want[p][:]); d > 1e-12 {
					t.Errorf("position %d: got %v, want %v (diff %g)", p, got[p], want[p], d)
				}
			}
		})
	}
	// Token 0 alone, worked through by hand. x = (1,0); attn_norm: r = sqrt(1/2+1/4),
	// a = (2/sqrt3, 0); v = (a0+2a1, a1) = (c, 0) with c = 2/sqrt3. One position, so
	// both heads return v; wo crosses head 1's first value into the second output:
	// o = (c, c), h = (1+c, c). ffn_norm f = h/sqrt(|h|^2/2+1/4), g = f0,
	// u = f0/2 + f1, s = silu(g) u = 1.1407954686876; y = (h0+s, h1-s) scaled by
	// 1/sqrt(|y|^2/2+1/4) and (2, 0.5): 2.765459504358444, 0.0029171562531839362
	// (computed independently in Python).
	got, err := m.LastToken([]int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(got, []float64{2.765459504358444, 0.0029171562531839362}); d > 1e-12 {
		t.Errorf("token 0: got %v, want [2.765459504358444 0.0029171562531839362] (diff %g)", got, d)
	}
}

// TestPrefixConsistency proves causality: the state at position k-1 of a sequence
// depends only on its first k tokens, so it equals LastToken of that prefix.
func TestPrefixConsistency(t *testing.T) {
	for _, typ := range []gguf.GGMLType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0} {
		t.Run(typ.String(), func(t *testing.T) {
			m := mustLoad(t, writeModel(t, modelSpec{cfg: smallConfig, typ: typ, seed: 3}))
			tokens := []int32{5, 17, 3, 3, 49, 0, 22, 8, 31, 12, 40, 7}
			all, err := m.Hidden(tokens)
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != len(tokens) || len(all[0]) != m.Dim() {
				t.Fatalf("Hidden gave %d x %d, want %d x %d", len(all), len(all[0]), len(tokens), m.Dim())
			}
			for k := 1; k <= len(tokens); k++ {
				last, err := m.LastToken(tokens[:k])
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(all[k-1], last); d > 1e-12 {
					t.Errorf("prefix %d: Hidden[%d] and LastToken differ by %g", k, k-1, d)
				}
			}
		})
	}
}

func TestDistinctAndDeterministic(t *testing.T) {
	m := mustLoad(t, writeModel(t, modelSpec{cfg: smallConfig, typ: gguf.TypeF16, seed: 4}))
	inputs := [][]int32{
		{1},
		{2},
		{1, 2},
		{2, 1}, // same tokens, other order: only RoPE tells them apart
		{1, 2, 3},
		{9, 2, 3}, // differs from the previous only in its first token
	}
	vecs := make([][]float64, len(inputs))
	for i, in := range inputs {
		v, err := m.LastToken(in)
		if err != nil {
			t.Fatal(err)
		}
		vecs[i] = v
	}
	for i := range vecs {
		for j := i + 1; j < len(vecs); j++ {
			if c := cosine(vecs[i], vecs[j]); c > 0.99 {
				t.Errorf("inputs %v and %v: cosine %.5f, want distinct vectors (< 0.99)", inputs[i], inputs[j], c)
			}
		}
	}
	again, _ := m.LastToken(inputs[4])
	if d := maxAbsDiff(again, vecs[4]); d != 0 {
		t.Errorf("the same input gave vectors differing by %g", d)
	}

	// A run of one token is the exception, and a useful check: every value vector is
	// the same, RoPE touches only queries and keys, and softmax weights sum to 1, so
	// every position's state equals that of the token alone.
	run, err := m.Hidden([]int32{1, 1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	for p, v := range run {
		if d := maxAbsDiff(v, vecs[0]); d > 1e-12 {
			t.Errorf("position %d of a run of token 1 differs from token 1 alone by %g", p, d)
		}
	}
}

// TestParallelMatmul checks that splitting a large matmul across goroutines gives the
// serial result bit for bit.
func TestParallelMatmul(t *testing.T) {
	prev := runtime.GOMAXPROCS(4)
	defer runtime.GOMAXPROCS(prev)
	rng := rand.New(rand.NewPCG(5, 6))
	mat := matrix{in: 1024, out: 1030}
	mat.w = make([]float32, mat.in*mat.out)
	for i := range mat.w {
		mat.w[i] = float32(rng.NormFloat64())
	}
	x := make([][]float64, 2)
	for t := range x {
		x[t] = make([]float64, mat.in)
		for i := range x[t] {
			x[t][i] = rng.NormFloat64()
		}
	}
	got := matmul(mat, x)
	for tk := range x {
		for i := range mat.out {
			var s float64
			for k := range mat.in {
				s += float64(mat.w[i*mat.in+k]) * x[tk][k]
			}
			if got[tk][i] != s {
				t.Fatalf("out[%d][%d] = %v, want %v", tk, i, got[tk][i], s)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	m := mustLoad(t, writeModel(t, modelSpec{cfg: smallConfig, typ: gguf.TypeF32, seed: 1}))
	if _, err := m.LastToken(nil); err == nil || !strings.Contains(err.Error(), "no tokens") {
		t.Errorf("empty input: %v", err)
	}
	if _, err := m.Hidden([]int32{1, 50}); err == nil || !strings.Contains(err.Error(), "token 50 at position 1 is outside the vocabulary [0, 50)") {
		t.Errorf("out-of-range token: %v", err)
	}
	if _, err := m.LastToken([]int32{-1}); err == nil || !strings.Contains(err.Error(), "token -1 at position 0") {
		t.Errorf("negative token: %v", err)
	}

	tests := []struct {
		name string
		spec modelSpec
		want string
	}{
		{"architecture", modelSpec{cfg: smallConfig, typ: gguf.TypeF32, arch: "llama"}, `general.architecture is "llama"`},
		{"missing tensor", modelSpec{cfg: smallConfig, typ: gguf.TypeF32, skip: "blk.2.ffn_up.weight"}, `tensor "blk.2.ffn_up.weight" is missing`},
		{"rope scaling", modelSpec{cfg: smallConfig, typ: gguf.TypeF32, extraKV: map[string]any{"qwen3.rope.scaling.type": "yarn"}}, `qwen3.rope.scaling.type "yarn" is not implemented`},
		{"rope dims", modelSpec{cfg: smallConfig, typ: gguf.TypeF32, extraKV: map[string]any{"qwen3.rope.dimension_count": uint32(4)}}, "rope.dimension_count 4 differs from the head size 8"},
		{"bf16 ok", modelSpec{cfg: smallConfig, typ: gguf.TypeBF16}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeModel(t, tt.spec))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load error = %v, want one containing %q", err, tt.want)
			}
		})
	}

	// A config whose FFN size disagrees with the tensors: the tensor is named.
	c := smallConfig
	path := writeModel(t, modelSpec{cfg: c, typ: gguf.TypeF32})
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bad := gguf.NewWriter()
	for _, k := range f.Keys() {
		v, _ := f.Get(k)
		if k == "qwen3.feed_forward_length" {
			v = uint32(48)
		}
		bad.AddKV(k, v)
	}
	for _, ti := range f.Tensors() {
		bad.AddTensor(ti.Name, ti.Type, ti.Dims, func(w io.Writer) error {
			_, err := io.Copy(w, f.TensorReader(ti))
			return err
		})
	}
	badPath := filepath.Join(t.TempDir(), "bad.gguf")
	if err := bad.WriteFile(badPath); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(badPath); err == nil || !strings.Contains(err.Error(), `tensor "blk.0.ffn_gate.weight" has dims [32 64], want [32 48]`) {
		t.Errorf("FFN size mismatch: %v", err)
	}
}

// TestRerankHeads checks the two layouts a Qwen3-Reranker's yes/no logits come from:
// a cls.output.weight head holding copies of two rows of the (tied) LM head, as
// llama.cpp's conversion writes it, gives exactly the logits of the full head at
// those token ids.
func TestRerankHeads(t *testing.T) {
	const yes, no = 7, 31
	embd := make([]float32, smallConfig.Hidden*smallConfig.Vocab)
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range embd {
		embd[i] = float32(0.5 * rng.NormFloat64())
	}
	h := smallConfig.Hidden
	head := append(append([]float32(nil), embd[yes*h:(yes+1)*h]...), embd[no*h:(no+1)*h]...)
	m := mustLoad(t, writeModel(t, modelSpec{cfg: smallConfig, typ: gguf.TypeF32, seed: 5, cls: 2,
		weights: map[string][]float32{"token_embd.weight": embd, "cls.output.weight": head}}))
	var spread []float64
	for _, tokens := range [][]int32{{1}, {4, 9, 2}, {3, 3, 8, 40, 12}} {
		got, err := m.ClassifierLogits(tokens)
		if err != nil {
			t.Fatal(err)
		}
		want, err := m.TokenLogits(tokens, []int32{yes, no})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || maxAbsDiff(got, want) > 1e-12 {
			t.Errorf("%v: ClassifierLogits %v, TokenLogits %v; want equal", tokens, got, want)
		}
		spread = append(spread, got[0]-got[1])
	}
	if math.Abs(spread[0]-spread[1]) < 1e-3 || math.Abs(spread[1]-spread[2]) < 1e-3 {
		t.Errorf("logit differences %v barely depend on the input", spread)
	}

	plain := mustLoad(t, writeModel(t, modelSpec{cfg: smallConfig, typ: gguf.TypeF32, seed: 5}))
	if _, err := plain.ClassifierLogits([]int32{1}); err == nil || !strings.Contains(err.Error(), "no cls.output.weight") {
		t.Errorf("ClassifierLogits without a head: err = %v", err)
	}
	if _, err := plain.TokenLogits([]int32{1}, []int32{int32(smallConfig.Vocab)}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("TokenLogits of an id outside the vocabulary: err = %v", err)
	}
}

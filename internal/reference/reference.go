// Package reference is a float64 Qwen3 forward pass over a GGUF file: the numerical
// ground truth that tests hold llama.cpp (and any other engine) against.
//
// It follows llama.cpp's qwen3 graph (src/models/qwen3.cpp) step by step and favours
// being obviously right over being fast: every weight is dequantised once at Load, all
// arithmetic is float64, every sum runs in a fixed order (so results are deterministic,
// parallel or not), and there is no KV cache, batching or quantised arithmetic.
// Weights are held as float32, which is exact for the F32, F16, BF16 and Q8_0 values a
// GGUF stores (Load refuses anything else), so memory is 4 bytes per parameter.
//
// It knows the Qwen3 architecture and nothing else: no tokenizer, no pooling policy,
// no normalisation of the output, no serving concerns.
package reference

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"

	"github.com/embed-stack/embed-stack/gguf"
)

// Config is the model's hyperparameters as read from the GGUF metadata.
type Config struct {
	Hidden   int     // qwen3.embedding_length
	Layers   int     // qwen3.block_count
	Heads    int     // qwen3.attention.head_count
	KVHeads  int     // qwen3.attention.head_count_kv
	HeadDim  int     // qwen3.attention.key_length (= value_length = rope dimensions)
	FFN      int     // qwen3.feed_forward_length
	Vocab    int     // rows of token_embd.weight
	RopeBase float64 // qwen3.rope.freq_base
	Epsilon  float64 // qwen3.attention.layer_norm_rms_epsilon
}

// matrix is a weight of out rows by in columns, row-major: GGUF dims [in, out], which
// ggml_mul_mat applies as out[i] = sum_k w[i*in+k] * x[k].
type matrix struct {
	in, out int
	w       []float32
}

type layer struct {
	attnNorm, qNorm, kNorm, ffnNorm []float64
	wq, wk, wv, wo                  matrix
	gate, up, down                  matrix
}

// Model is a loaded Qwen3 model. It is immutable after Load and safe for concurrent
// use.
type Model struct {
	cfg        Config
	embd       matrix // [vocab rows of hidden values]
	layers     []layer
	outputNorm []float64
	// cls is the classifier head cls.output.weight, when the GGUF has one: a
	// Qwen3-Reranker as llama.cpp converts it keeps there the LM head's rows of
	// "yes" and "no" (out = 2). Zero otherwise.
	cls matrix
	// untied says the GGUF has its own output.weight, which TokenLogits does not
	// implement.
	untied bool
}

// Load reads the hyperparameters and every weight of the qwen3 GGUF at path.
func Load(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	defer f.Close()
	m, err := load(f)
	if err != nil {
		return nil, fmt.Errorf("reference: %s: %w", path, err)
	}
	return m, nil
}

func load(f *gguf.File) (*Model, error) {
	cfg, err := readConfig(f)
	if err != nil {
		return nil, err
	}
	embd, ok := f.Tensor("token_embd.weight")
	if !ok {
		return nil, errors.New(`tensor "token_embd.weight" is missing`)
	}
	if len(embd.Dims) != 2 || embd.Dims[0] != uint64(cfg.Hidden) || embd.Dims[1] == 0 || embd.Dims[1] > math.MaxInt32 {
		return nil, fmt.Errorf(`tensor "token_embd.weight" has dims %v, want [%d n_vocab]`, embd.Dims, cfg.Hidden)
	}
	cfg.Vocab = int(embd.Dims[1])

	m := &Model{cfg: cfg, layers: make([]layer, cfg.Layers)}
	l := loader{f: f}
	m.embd = l.matrix("token_embd.weight", cfg.Hidden, cfg.Vocab)
	h, q, kv := cfg.Hidden, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	for i := range m.layers {
		p := fmt.Sprintf("blk.%d.", i)
		m.layers[i] = layer{
			attnNorm: l.vector(p+"attn_norm.weight", h),
			wq:       l.matrix(p+"attn_q.weight", h, q),
			wk:       l.matrix(p+"attn_k.weight", h, kv),
			wv:       l.matrix(p+"attn_v.weight", h, kv),
			wo:       l.matrix(p+"attn_output.weight", q, h),
			qNorm:    l.vector(p+"attn_q_norm.weight", cfg.HeadDim),
			kNorm:    l.vector(p+"attn_k_norm.weight", cfg.HeadDim),
			ffnNorm:  l.vector(p+"ffn_norm.weight", h),
			gate:     l.matrix(p+"ffn_gate.weight", h, cfg.FFN),
			up:       l.matrix(p+"ffn_up.weight", h, cfg.FFN),
			down:     l.matrix(p+"ffn_down.weight", cfg.FFN, h),
		}
	}
	m.outputNorm = l.vector("output_norm.weight", h)
	if t, ok := f.Tensor("cls.output.weight"); ok {
		if len(t.Dims) != 2 || t.Dims[1] == 0 || t.Dims[1] > 64 {
			return nil, fmt.Errorf(`tensor "cls.output.weight" has dims %v, want [%d n_labels]`, t.Dims, h)
		}
		m.cls = l.matrix("cls.output.weight", h, int(t.Dims[1]))
	}
	_, m.untied = f.Tensor("output.weight")
	if l.err != nil {
		return nil, l.err
	}
	return m, nil
}

// readConfig reads the hyperparameters with llama.cpp's defaults (llama-model.cpp
// load_hparams) and refuses settings that change the graph in ways this package does
// not implement, rather than silently computing something else.
func readConfig(f *gguf.File) (Config, error) {
	var cfg Config
	s, err := f.Shape()
	if err != nil {
		return cfg, err
	}
	if s.Architecture != "qwen3" {
		return cfg, fmt.Errorf("%s is %q; the reference implements only \"qwen3\"", gguf.KeyArchitecture, s.Architecture)
	}
	if err := s.Require(gguf.KeyEmbeddingLength, gguf.KeyBlockCount, gguf.KeyFeedForwardLength, gguf.KeyHeadCount, gguf.KeyRMSEpsilon); err != nil {
		return cfg, err
	}
	cfg.Hidden, cfg.Layers, cfg.FFN = s.EmbeddingLength, s.Layers, s.FeedForwardLength
	cfg.Heads, cfg.KVHeads, cfg.HeadDim = s.Heads, s.KVHeads, s.KeyLength
	switch {
	case cfg.Hidden <= 0 || cfg.Layers <= 0 || cfg.FFN <= 0 || cfg.Heads <= 0 || cfg.KVHeads <= 0 || cfg.HeadDim <= 0:
		return cfg, fmt.Errorf("hyperparameters %+v must all be positive", cfg)
	case cfg.Heads%cfg.KVHeads != 0:
		return cfg, fmt.Errorf("head_count %d is not a multiple of head_count_kv %d", cfg.Heads, cfg.KVHeads)
	case s.ValueLength != cfg.HeadDim:
		return cfg, fmt.Errorf("value_length %d differs from key_length %d (llama.cpp's qwen3 graph asserts they are equal)", s.ValueLength, cfg.HeadDim)
	case s.RopeDimensions != cfg.HeadDim:
		return cfg, fmt.Errorf("rope.dimension_count %d differs from the head size %d (llama.cpp's qwen3 graph asserts they are equal)", s.RopeDimensions, cfg.HeadDim)
	case cfg.HeadDim%2 != 0:
		return cfg, fmt.Errorf("head size %d is odd; RoPE rotates pairs", cfg.HeadDim)
	}
	cfg.RopeBase = float64(s.RopeFreqBase) // llama.cpp's default, 10000, when the key is absent
	// llama.cpp holds eps as a float; using the same float32 value keeps the two
	// computations comparable to far below any test tolerance.
	cfg.Epsilon = float64(s.RMSEpsilon)

	// RoPE scaling (YaRN, linear) changes the rotation; refuse it instead of ignoring it.
	if t := s.RopeScalingType; t != "" && t != "none" {
		return cfg, fmt.Errorf("%s %q is not implemented by the reference", s.Key(gguf.KeyRopeScalingType), t)
	}
	if v := s.RopeScalingFactor; v != 0 && v != 1 {
		return cfg, fmt.Errorf("%s %g is not implemented by the reference", s.Key(gguf.KeyRopeScalingFactor), v)
	}
	return cfg, nil
}

// loader reads tensors, keeping the first error so that Load reads as a flat list.
type loader struct {
	f   *gguf.File
	err error
}

func (l *loader) tensor(name string, dims ...uint64) []float32 {
	if l.err != nil {
		return nil
	}
	t, ok := l.f.Tensor(name)
	if !ok {
		l.err = fmt.Errorf("tensor %q is missing", name)
		return nil
	}
	if fmt.Sprint(t.Dims) != fmt.Sprint(dims) {
		l.err = fmt.Errorf("tensor %q has dims %v, want %v", name, t.Dims, dims)
		return nil
	}
	out, err := readFloat32(l.f, t)
	if err != nil {
		l.err = fmt.Errorf("tensor %q: %w", name, err)
	}
	return out
}

func (l *loader) matrix(name string, in, out int) matrix {
	return matrix{in: in, out: out, w: l.tensor(name, uint64(in), uint64(out))}
}

func (l *loader) vector(name string, n int) []float64 {
	w := l.tensor(name, uint64(n))
	v := make([]float64, len(w))
	for i, x := range w {
		v[i] = float64(x)
	}
	return v
}

// readFloat32 dequantises a tensor a chunk of rows at a time (so the 0.6B model's
// embedding matrix never exists as float64) and checks that float32 holds every value
// exactly.
func readFloat32(f *gguf.File, t gguf.TensorInfo) ([]float32, error) {
	rowBytes := t.Dims[0] / t.Type.BlockSize() * t.Type.TypeSize()
	rows := t.Elements() / t.Dims[0]
	chunkRows := max(1, (4<<20)/rowBytes)
	r := f.TensorReader(t)
	out := make([]float32, 0, t.Elements())
	buf := make([]byte, chunkRows*rowBytes)
	for done := uint64(0); done < rows; done += chunkRows {
		p := buf[:min(chunkRows, rows-done)*rowBytes]
		if _, err := io.ReadFull(r, p); err != nil {
			return nil, err
		}
		vals, err := gguf.Decode(t.Type, p)
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			if float64(float32(v)) != v && !math.IsNaN(v) {
				return nil, fmt.Errorf("%s value %g is not exactly representable as float32", t.Type, v)
			}
			out = append(out, float32(v))
		}
	}
	return out, nil
}

// Config returns the hyperparameters.
func (m *Model) Config() Config { return m.cfg }

// Dim is the size of a hidden state (qwen3.embedding_length).
func (m *Model) Dim() int { return m.cfg.Hidden }

// Hidden returns the final hidden state (after output_norm) of every position.
func (m *Model) Hidden(tokens []int32) ([][]float64, error) {
	return m.forward(tokens, true)
}

// LastToken returns the final hidden state of the last token: what llama.cpp's LAST
// pooling yields before any L2 normalisation. Like llama.cpp with a single output row,
// it computes the last layer's attention output and feed-forward for that row only.
func (m *Model) LastToken(tokens []int32) ([]float64, error) {
	h, err := m.forward(tokens, false)
	if err != nil {
		return nil, err
	}
	return h[0], nil
}

// ClassifierLogits returns the classifier head applied to the last token's final
// hidden state: cls.output.weight · LastToken(tokens), one value per row, before any
// softmax. For a Qwen3-Reranker converted by llama.cpp the rows are "yes" and "no",
// and P(yes) = 1 / (1 + exp(no - yes)).
func (m *Model) ClassifierLogits(tokens []int32) ([]float64, error) {
	if m.cls.out == 0 {
		return nil, errors.New("reference: the model has no cls.output.weight")
	}
	h, err := m.LastToken(tokens)
	if err != nil {
		return nil, err
	}
	return matmul(m.cls, [][]float64{h})[0], nil
}

// TokenLogits returns the LM head's logits of the given token ids at the last
// position, with the head tied to token_embd.weight (as in Qwen3-0.6B): what a
// Qwen3-Reranker whose GGUF keeps the whole head yields for "yes" and "no".
func (m *Model) TokenLogits(tokens []int32, ids []int32) ([]float64, error) {
	if m.untied {
		return nil, errors.New("reference: the model has its own output.weight; only a head tied to token_embd is implemented")
	}
	h, err := m.LastToken(tokens)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(ids))
	for i, id := range ids {
		if id < 0 || int(id) >= m.cfg.Vocab {
			return nil, fmt.Errorf("reference: token id %d is outside the vocabulary [0, %d)", id, m.cfg.Vocab)
		}
		for k, w := range m.embd.w[int(id)*m.cfg.Hidden : (int(id)+1)*m.cfg.Hidden] {
			out[i] += float64(w) * h[k]
		}
	}
	return out, nil
}

// forward runs the qwen3 graph. With all=false only the last position's output is
// computed in the last layer (llama.cpp's inp_out_ids) and only it is returned.
func (m *Model) forward(tokens []int32, all bool) ([][]float64, error) {
	if len(tokens) == 0 {
		return nil, errors.New("reference: no tokens")
	}
	c := m.cfg
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || int(id) >= c.Vocab {
			return nil, fmt.Errorf("reference: token %d at position %d is outside the vocabulary [0, %d)", id, t, c.Vocab)
		}
		row := m.embd.w[int(id)*c.Hidden : (int(id)+1)*c.Hidden]
		x[t] = make([]float64, c.Hidden)
		for i, v := range row {
			x[t][i] = float64(v)
		}
	}

	for il, ly := range m.layers {
		// Positions whose layer output is still needed; everything before the last
		// layer feeds later positions' keys and values, so it is always computed.
		out := x
		if il == len(m.layers)-1 && !all {
			out = x[len(x)-1:]
		}

		cur := rmsNormAll(x, ly.attnNorm, c.Epsilon)
		q := matmul(ly.wq, cur[len(x)-len(out):])
		k := matmul(ly.wk, cur)
		v := matmul(ly.wv, cur)
		for t := range q {
			pos := len(x) - len(out) + t
			for h := range c.Heads {
				head := q[t][h*c.HeadDim : (h+1)*c.HeadDim]
				rmsNorm(head, head, ly.qNorm, c.Epsilon)
				ropeNeox(head, pos, c.RopeBase)
			}
		}
		for t := range k {
			for h := range c.KVHeads {
				head := k[t][h*c.HeadDim : (h+1)*c.HeadDim]
				rmsNorm(head, head, ly.kNorm, c.Epsilon)
				ropeNeox(head, t, c.RopeBase)
			}
		}
		attn := attention(q, k, v, len(x)-len(out), c)
		o := matmul(ly.wo, attn)
		for t := range out {
			addTo(out[t], o[t])
		}

		cur = rmsNormAll(out, ly.ffnNorm, c.Epsilon)
		g := matmul(ly.gate, cur)
		up := matmul(ly.up, cur)
		for t := range g {
			for i, gv := range g[t] {
				g[t][i] = silu(gv) * up[t][i]
			}
		}
		d := matmul(ly.down, g)
		for t := range out {
			addTo(out[t], d[t])
		}
		x = out
	}
	return rmsNormAll(x, m.outputNorm, c.Epsilon), nil
}

// attention is causal softmax attention with grouped KV heads. q holds the queries of
// positions first, first+1, ...; k and v hold every position from 0. Query head h reads
// KV head h/(Heads/KVHeads), as ggml_mul_mat broadcasts K and V across query heads.
func attention(q, k, v [][]float64, first int, c Config) [][]float64 {
	scale := 1 / math.Sqrt(float64(c.HeadDim))
	group := c.Heads / c.KVHeads
	out := make([][]float64, len(q))
	scores := make([]float64, len(k))
	for t := range q {
		pos := first + t
		out[t] = make([]float64, c.Heads*c.HeadDim)
		for h := range c.Heads {
			qh := q[t][h*c.HeadDim : (h+1)*c.HeadDim]
			kvh := h / group
			lo, hi := kvh*c.HeadDim, (kvh+1)*c.HeadDim
			maxScore := math.Inf(-1)
			for j := 0; j <= pos; j++ {
				scores[j] = dot(qh, k[j][lo:hi]) * scale
				maxScore = max(maxScore, scores[j])
			}
			var sum float64
			for j := 0; j <= pos; j++ {
				scores[j] = math.Exp(scores[j] - maxScore)
				sum += scores[j]
			}
			oh := out[t][h*c.HeadDim : (h+1)*c.HeadDim]
			for j := 0; j <= pos; j++ {
				p := scores[j] / sum
				for i, vv := range v[j][lo:hi] {
					oh[i] += p * vv
				}
			}
		}
	}
	return out
}

// rmsNorm is ggml_rms_norm followed by the elementwise weight:
// dst = src / sqrt(mean(src^2) + eps) * w. dst may alias src.
func rmsNorm(dst, src, w []float64, eps float64) {
	var ss float64
	for _, v := range src {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(src))+eps)
	for i, v := range src {
		dst[i] = v * s * w[i]
	}
}

func rmsNormAll(x [][]float64, w []float64, eps float64) [][]float64 {
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = make([]float64, len(x[t]))
		rmsNorm(out[t], x[t], w, eps)
	}
	return out
}

// ropeNeox rotates x in place by position pos, NEOX style (LLAMA_ROPE_TYPE_NEOX, which
// llama_model_rope_type gives qwen3): element i pairs with i+d/2 and the pair turns by
// pos * base^(-2i/d). No frequency scaling: qwen3 GGUFs set none, and Load refuses any.
func ropeNeox(x []float64, pos int, base float64) {
	half := len(x) / 2
	for i := range half {
		theta := float64(pos) * math.Pow(base, -2*float64(i)/float64(len(x)))
		sin, cos := math.Sincos(theta)
		x0, x1 := x[i], x[i+half]
		x[i] = x0*cos - x1*sin
		x[i+half] = x0*sin + x1*cos
	}
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

func dot(a, b []float64) float64 {
	var s float64
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

func addTo(dst, src []float64) {
	for i, v := range src {
		dst[i] += v
	}
}

// matmul applies m to every row of x. Output rows are split across goroutines when
// the work is large; each output element is one dot product in a fixed order, so the
// result does not depend on the split.
func matmul(m matrix, x [][]float64) [][]float64 {
	out := make([][]float64, len(x))
	for t := range out {
		out[t] = make([]float64, m.out)
	}
	rows := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			w := m.w[i*m.in : (i+1)*m.in]
			for t, xt := range x {
				var s float64
				for k, wv := range w {
					s += float64(wv) * xt[k]
				}
				out[t][i] = s
			}
		}
	}
	workers := runtime.GOMAXPROCS(0)
	if workers < 2 || m.in*m.out*len(x) < 1<<20 {
		rows(0, m.out)
		return out
	}
	var wg sync.WaitGroup
	step := (m.out + workers - 1) / workers
	for lo := 0; lo < m.out; lo += step {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			rows(lo, hi)
		}(lo, min(lo+step, m.out))
	}
	wg.Wait()
	return out
}

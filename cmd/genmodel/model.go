package main

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"

	"github.com/embed-stack/embed-stack/gguf"
)

// shape is a Qwen3 architecture size. The hyperparameters every shape shares (rope
// base, RMS epsilon, tied embeddings, LAST pooling) are constants below.
type shape struct {
	name    string
	hidden  uint32 // qwen3.embedding_length
	layers  uint32 // qwen3.block_count
	heads   uint32 // qwen3.attention.head_count
	kvHeads uint32 // qwen3.attention.head_count_kv
	headDim uint32 // qwen3.attention.key_length = value_length
	ffn     uint32 // qwen3.feed_forward_length
	context uint32 // qwen3.context_length
}

var shapes = map[string]shape{
	// tiny exercises every code path of the real architecture (GQA, q/k norms, several
	// layers) with the real vocabulary, and is written in about a second.
	"tiny": {name: "tiny", hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, ffn: 192, context: 32768},
	// 0.6b is Qwen3-Embedding-0.6B's shape, for realistic memory and speed figures.
	"0.6b": {name: "0.6b", hidden: 1024, layers: 28, heads: 16, kvHeads: 8, headDim: 128, ffn: 3072, context: 32768},
}

const (
	ropeFreqBase = 1e6
	rmsEpsilon   = 1e-6
)

// rerankTemplate is the chat template llama.cpp's conversion (convert_hf_to_gguf.py,
// Qwen3Model) stores as tokenizer.chat_template.rerank in a Qwen3-Reranker GGUF.
const rerankTemplate = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n" +
	"<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n" +
	"<|im_start|>assistant\n<think>\n\n</think>\n\n"

// Initialisation scales. Projections are N(0, (matrixGain^2)/fan_in): with pre-norm
// inputs of unit RMS each attention and FFN block then adds a contribution of roughly
// unit variance, so the residual stream grows slowly (about sqrt(layers)) instead of
// vanishing or exploding, and every layer, attention across positions included, moves
// the final vector. Norm weights are near 1 so the norms neither mask nor dominate.
const (
	embeddingStd = 0.5
	matrixGain   = 1.0
	normNoise    = 0.1
	// headGain scales a reranker's two head rows as N(0, headGain^2/hidden): the
	// final hidden state has unit RMS, so each logit has a standard deviation of about
	// headGain and their difference about 1.4 x headGain, which spreads P(yes) over
	// (0, 1) instead of pinning it at 0, 1/2 or 1.
	headGain = 1.5
)

// fileType maps a matrix type to general.file_type (llama.cpp's enum llama_ftype).
var fileType = map[gguf.GGMLType]uint32{
	gguf.TypeF32:  0,  // LLAMA_FTYPE_ALL_F32
	gguf.TypeF16:  1,  // LLAMA_FTYPE_MOSTLY_F16
	gguf.TypeQ8_0: 7,  // LLAMA_FTYPE_MOSTLY_Q8_0
	gguf.TypeBF16: 32, // LLAMA_FTYPE_MOSTLY_BF16
}

type options struct {
	shape shape
	typ   gguf.GGMLType // of the 2-D matrices, token_embd included; norms are always F32
	seed  uint64
	name  string // general.name
	vocab *vocab
	// rerank writes a Qwen3-Reranker as llama.cpp's conversion lays it out: pooling
	// type RANK, classifier labels ["yes", "no"], the rerank chat template, and
	// cls.output.weight holding the LM head's "yes" and "no" rows (here random).
	rerank bool
	// record, when set, receives every tensor as it is added (for writeHF).
	record *[]tensorSpec
}

type summary struct {
	bytes      int64
	parameters uint64
	tensors    int
}

// dist describes how one tensor's values are drawn: mean + std * N(0, 1).
type dist struct {
	mean, std float64
}

// build adds the metadata and tensors of a Qwen3 model to w. Metadata keys and value
// types are those llama.cpp's loader reads for LLM_ARCH_QWEN3 (llama-arch.cpp,
// llama-model.cpp load_hparams), which checks value types strictly: counts are uint32,
// floats float32. Tensor shapes are those of llama-model.cpp's create_tensor calls for
// QWEN3, in GGUF order (row length first); with tied embeddings there is no
// output.weight, as in the official Qwen3-Embedding GGUFs.
func build(w *gguf.Writer, o options) (parameters uint64, tensors int, err error) {
	s := o.shape
	ftype, ok := fileType[o.typ]
	if !ok {
		return 0, 0, fmt.Errorf("matrix type %s is not supported; use f32, f16, bf16 or q8_0", o.typ)
	}
	if s.heads%s.kvHeads != 0 {
		return 0, 0, fmt.Errorf("shape %s: %d heads is not a multiple of %d KV heads", s.name, s.heads, s.kvHeads)
	}
	nVocab := uint64(len(o.vocab.tokens))

	w.AddKV("general.architecture", "qwen3")
	w.AddKV("general.name", o.name)
	w.AddKV("general.file_type", ftype)
	if o.typ == gguf.TypeQ8_0 {
		w.AddKV("general.quantization_version", uint32(2)) // GGML_QNT_VERSION
	}
	w.AddKV("qwen3.context_length", s.context)
	w.AddKV("qwen3.embedding_length", s.hidden)
	w.AddKV("qwen3.block_count", s.layers)
	w.AddKV("qwen3.feed_forward_length", s.ffn)
	w.AddKV("qwen3.attention.head_count", s.heads)
	w.AddKV("qwen3.attention.head_count_kv", s.kvHeads)
	w.AddKV("qwen3.attention.key_length", s.headDim)
	w.AddKV("qwen3.attention.value_length", s.headDim)
	w.AddKV("qwen3.rope.freq_base", float32(ropeFreqBase))
	w.AddKV("qwen3.attention.layer_norm_rms_epsilon", float32(rmsEpsilon))
	// Rank pooling as llama.cpp's conversion of Qwen3-Reranker sets; last-token
	// pooling as the official embedding GGUF does.
	if o.rerank {
		w.AddKV("qwen3.pooling_type", uint32(gguf.PoolingRank))
		w.AddKV("qwen3.classifier.output_labels", []string{"yes", "no"})
	} else {
		w.AddKV("qwen3.pooling_type", uint32(gguf.PoolingLast))
	}
	w.AddKV("tokenizer.ggml.model", "gpt2")
	w.AddKV("tokenizer.ggml.pre", "qwen2")
	w.AddKV("tokenizer.ggml.tokens", o.vocab.tokens)
	w.AddKV("tokenizer.ggml.token_type", o.vocab.types)
	w.AddKV("tokenizer.ggml.merges", o.vocab.merges)
	w.AddKV("tokenizer.ggml.eos_token_id", o.vocab.eosID)
	w.AddKV("tokenizer.ggml.padding_token_id", o.vocab.eosID)
	w.AddKV("tokenizer.ggml.bos_token_id", o.vocab.eosID)
	w.AddKV("tokenizer.ggml.add_bos_token", false)
	w.AddKV("tokenizer.ggml.add_eos_token", true)
	if o.rerank {
		w.AddKV("tokenizer.chat_template.rerank", rerankTemplate)
	}

	hidden, q, kv, ffn := uint64(s.hidden), uint64(s.heads*s.headDim), uint64(s.kvHeads*s.headDim), uint64(s.ffn)
	add := func(name string, typ gguf.GGMLType, dims []uint64, in dist) {
		fill := fillRandom(o.seed, name, typ, dims, in)
		w.AddTensor(name, typ, dims, fill)
		if o.record != nil {
			*o.record = append(*o.record, tensorSpec{name: name, typ: typ, dims: dims, fill: fill})
		}
		n := uint64(1)
		for _, d := range dims {
			n *= d
		}
		parameters += n
		tensors++
	}
	matrix := func(name string, fanIn, fanOut uint64) {
		add(name, o.typ, []uint64{fanIn, fanOut}, dist{std: matrixGain / math.Sqrt(float64(fanIn))})
	}
	norm := func(name string, n uint64) {
		add(name, gguf.TypeF32, []uint64{n}, dist{mean: 1, std: normNoise})
	}

	add("token_embd.weight", o.typ, []uint64{hidden, nVocab}, dist{std: embeddingStd})
	for l := range s.layers {
		p := fmt.Sprintf("blk.%d.", l)
		norm(p+"attn_norm.weight", hidden)
		matrix(p+"attn_q.weight", hidden, q)
		matrix(p+"attn_k.weight", hidden, kv)
		matrix(p+"attn_v.weight", hidden, kv)
		matrix(p+"attn_output.weight", q, hidden)
		norm(p+"attn_q_norm.weight", uint64(s.headDim))
		norm(p+"attn_k_norm.weight", uint64(s.headDim))
		norm(p+"ffn_norm.weight", hidden)
		matrix(p+"ffn_gate.weight", hidden, ffn)
		matrix(p+"ffn_up.weight", hidden, ffn)
		matrix(p+"ffn_down.weight", ffn, hidden)
	}
	norm("output_norm.weight", hidden)
	if o.rerank {
		add("cls.output.weight", o.typ, []uint64{hidden, 2}, dist{std: headGain / math.Sqrt(float64(hidden))})
	}
	return parameters, tensors, nil
}

// fillRandom returns a fill function that draws the tensor's values from a PCG stream
// seeded by (seed, FNV-1a of the tensor name), so each tensor's values depend only on
// the seed and its name, not on the order of generation. Values are produced and
// encoded a chunk of rows at a time, so a 600 MB embedding matrix never sits in memory.
func fillRandom(seed uint64, name string, typ gguf.GGMLType, dims []uint64, in dist) func(io.Writer) error {
	return func(w io.Writer) error {
		h := fnv.New64a()
		h.Write([]byte(name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))

		rowLen, rows := dims[0], uint64(1)
		for _, d := range dims[1:] {
			rows *= d
		}
		chunkRows := max(1, (1<<16)/rowLen)
		vals := make([]float32, 0, chunkRows*rowLen)
		var buf []byte
		for r := uint64(0); r < rows; r += chunkRows {
			n := min(chunkRows, rows-r) * rowLen
			vals = vals[:n]
			for i := range vals {
				vals[i] = float32(in.mean + in.std*rng.NormFloat64())
			}
			var err error
			if buf, err = gguf.AppendEncoded(buf[:0], typ, vals); err != nil {
				return err
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
}

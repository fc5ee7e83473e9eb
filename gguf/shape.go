package gguf

import (
	"fmt"
	"slices"
	"strings"
)

// Metadata keys of a model's header, spelt as llama.cpp's LLM_KV table spells them
// (llama-arch.cpp).
const (
	KeyArchitecture   = "general.architecture"
	KeyName           = "general.name"
	KeyBaseName       = "general.basename"
	KeyTokenizerModel = "tokenizer.ggml.model"
	KeyTokens         = "tokenizer.ggml.tokens"
	KeyEOSTokenID     = "tokenizer.ggml.eos_token_id"
)

// Keys of the hyperparameters, relative to the architecture: a qwen3 model holds
// KeyBlockCount as "qwen3.block_count" (see Shape.Key).
const (
	KeyContextLength     = "context_length"
	KeyEmbeddingLength   = "embedding_length"
	KeyFeedForwardLength = "feed_forward_length"
	KeyBlockCount        = "block_count"
	KeyHeadCount         = "attention.head_count"
	KeyHeadCountKV       = "attention.head_count_kv"
	KeyKeyLength         = "attention.key_length"
	KeyValueLength       = "attention.value_length"
	KeyRMSEpsilon        = "attention.layer_norm_rms_epsilon"
	KeyRopeDimensions    = "rope.dimension_count"
	KeyRopeFreqBase      = "rope.freq_base"
	KeyRopeScalingType   = "rope.scaling.type"
	KeyRopeScalingFactor = "rope.scaling.factor"
	KeyPoolingType       = "pooling_type"
	KeyClassifierLabels  = "classifier.output_labels"
)

// Tensor names that Shape reads.
const (
	// TensorTokenEmbedding is the token-embedding table: one row per vocabulary id.
	TensorTokenEmbedding = "token_embd.weight"
	// TensorClassifier is a classifier head, which llama.cpp's conversion gives a
	// reranker (Qwen3-Reranker's "yes" and "no" rows, a cross-encoder's score).
	TensorClassifier = "cls.output.weight"
	// TensorClassifierDense is the layer a cross-encoder's classifier head
	// starts with (llama.cpp's LLM_TENSOR_CLS): BERT's pooler or RoBERTa's
	// classifier.dense, hidden × hidden, before TensorClassifier; or, in
	// jina-bert-v2, the one-row classifier itself (family.RankHead).
	TensorClassifierDense = "cls.weight"
)

// Pooling is how a model makes one vector of a sequence's per-token hidden states:
// the value of {arch}.pooling_type, numbered as llama.cpp's enum llama_pooling_type.
type Pooling int32

// Pooling types. The numbering is llama.cpp's and is part of the file format.
const (
	// PoolingUnspecified: the header declares no pooling type.
	PoolingUnspecified Pooling = -1
	// PoolingNone: no pooling, one output per token.
	PoolingNone Pooling = 0
	// PoolingMean: the mean of every token's state (BERT-style sentence encoders
	// such as all-MiniLM, nomic-embed, E5).
	PoolingMean Pooling = 1
	// PoolingCLS: the first token's state (BGE, gte).
	PoolingCLS Pooling = 2
	// PoolingLast: the last token's state (Qwen3-Embedding).
	PoolingLast Pooling = 3
	// PoolingRank: a classifier head over the pooled state, giving scores rather
	// than an embedding (rerankers; llama.cpp's conversion of Qwen3-Reranker).
	PoolingRank Pooling = 4
)

// String names the pooling type as llama.cpp's messages do ("mean", "cls", "last"),
// "unspecified", or "unknown" for a number llama.cpp does not define.
func (p Pooling) String() string {
	switch p {
	case PoolingUnspecified:
		return "unspecified"
	case PoolingNone:
		return "none"
	case PoolingMean:
		return "mean"
	case PoolingCLS:
		return "cls"
	case PoolingLast:
		return "last"
	case PoolingRank:
		return "rank"
	}
	return "unknown"
}

// ParsePooling reads a pooling type by the name String gives it: "none", "mean",
// "cls", "last" or "rank" (case-insensitive).
func ParsePooling(s string) (Pooling, error) {
	for p := PoolingNone; p <= PoolingRank; p++ {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	return PoolingUnspecified, fmt.Errorf("pooling %q is not one of none, mean, cls, last, rank", s)
}

// VocabType is a model's tokenizer algorithm: the value of tokenizer.ggml.model,
// spelt as llama.cpp's converter writes it (llama-vocab.cpp maps these to its enum
// llama_vocab_type). A value none of the constants name is kept as written.
type VocabType string

// Vocabulary types llama.cpp knows.
const (
	// VocabNone: the file has no vocabulary ("no_vocab" is read as this too).
	VocabNone VocabType = "none"
	// VocabSPM: SentencePiece byte-fallback BPE (Llama 2, Mistral, Gemma).
	VocabSPM VocabType = "llama"
	// VocabBPE: byte-level BPE (GPT-2, Qwen2 and Qwen3).
	VocabBPE VocabType = "gpt2"
	// VocabWPM: WordPiece (BERT, nomic-bert, all-MiniLM).
	VocabWPM VocabType = "bert"
	// VocabUGM: Unigram (T5, XLM-RoBERTa: multilingual-e5, bge-m3).
	VocabUGM VocabType = "t5"
	// VocabRWKV: RWKV's greedy tokenizer.
	VocabRWKV VocabType = "rwkv"
	// VocabPLaMo2: PLaMo-2's Aho-Corasick tokenizer.
	VocabPLaMo2 VocabType = "plamo2"
)

// Algorithm names the tokenizer algorithm as Hugging Face's tokenizers does: "BPE"
// (byte-level), "WordPiece", "Unigram", "SentencePiece BPE"; the value as written
// for another.
func (v VocabType) Algorithm() string {
	switch v {
	case VocabBPE:
		return "BPE"
	case VocabWPM:
		return "WordPiece"
	case VocabUGM:
		return "Unigram"
	case VocabSPM:
		return "SentencePiece BPE"
	}
	return string(v)
}

// Known reports whether llama.cpp can load a vocabulary of this type.
func (v VocabType) Known() bool {
	switch v {
	case VocabNone, VocabSPM, VocabBPE, VocabWPM, VocabUGM, VocabRWKV, VocabPLaMo2:
		return true
	}
	return false
}

// Shape is a model's architecture and sizes as its GGUF header states them, with the
// defaults llama.cpp applies when it loads the model (llama-model.cpp,
// load_hparams), so that what a caller derives from it (KV cache bytes, attention
// cost, the context to allocate) is what llama.cpp will do. Counts are 0 where the
// header lacks the key and llama.cpp has no default; Require names the keys a caller
// cannot do without. It knows no architecture: every key is read the same way for
// "qwen3", "bert", "nomic-bert" or "gemma-embedding".
type Shape struct {
	// Architecture is general.architecture ("qwen3"); the hyperparameter keys are
	// prefixed with it. The only key Shape requires.
	Architecture string
	// Name is general.name ("Qwen3 Embedding 0.6B"), and BaseName
	// general.basename ("Qwen3-Embedding"), which llama.cpp's converter writes
	// from the Hugging Face repository's name; "" when absent.
	Name, BaseName string

	// ContextLength is the training context in tokens; 0 when absent.
	ContextLength int
	// EmbeddingLength is the hidden size (n_embd).
	EmbeddingLength int
	// FeedForwardLength is the feed-forward layers' inner size (n_ff).
	FeedForwardLength int
	// Layers is the number of transformer blocks (block_count).
	Layers int

	// Heads is the number of attention (query) heads, and KVHeads that of the key
	// and value heads: Heads when the header does not say (no grouped-query
	// attention). Where the header gives one count per layer, the largest.
	Heads, KVHeads int
	// KeyLength and ValueLength are the width of one key and one value head:
	// EmbeddingLength / Heads each when the header does not say (Qwen3 says: 128,
	// not 1024 / 16).
	KeyLength, ValueLength int
	// RMSEpsilon is attention.layer_norm_rms_epsilon; 0 when absent.
	RMSEpsilon float32

	// RopeDimensions is how many of a head's dimensions RoPE rotates: KeyLength
	// when the header does not say. RopeFreqBase is RoPE's base (10000 when
	// absent). RopeScalingType ("" when absent, which llama.cpp reads as linear)
	// and RopeScalingFactor (0 when absent: no scaling) describe context
	// extension (YaRN, linear).
	RopeDimensions    int
	RopeFreqBase      float32
	RopeScalingType   string
	RopeScalingFactor float32

	// Pooling is the declared pooling type; PoolingUnspecified when absent.
	Pooling Pooling
	// HasClassifier says the file holds a classifier head (TensorClassifier), and
	// ClassifierLabels names its outputs (nil when the header does not).
	HasClassifier    bool
	ClassifierLabels []string
	// ClassifierDims and DenseDims are the dims of TensorClassifier and
	// TensorClassifierDense (ggml's order: values a row first); nil for a tensor
	// the file does not hold.
	ClassifierDims, DenseDims []uint64

	// Vocab is the tokenizer algorithm; "" when the header does not say.
	Vocab VocabType
	// VocabSize is the number of rows of the token-embedding table, the ids the
	// model can embed; 0 when the file has no two-dimensional TensorTokenEmbedding.
	VocabSize int
	// EOS is tokenizer.ggml.eos_token_id; -1 when absent.
	EOS int

	// present has bit i set when the header holds archKeys[i] (see Require).
	present uint32
}

// archKeys are the architecture-relative keys Shape reads, in bit order of present.
var archKeys = []string{
	KeyContextLength, KeyEmbeddingLength, KeyFeedForwardLength, KeyBlockCount,
	KeyHeadCount, KeyHeadCountKV, KeyKeyLength, KeyValueLength, KeyRMSEpsilon,
	KeyRopeDimensions, KeyRopeFreqBase, KeyRopeScalingType, KeyRopeScalingFactor,
	KeyPoolingType, KeyClassifierLabels,
}

// Key is the full name of an architecture-relative key: Key(KeyBlockCount) is
// "qwen3.block_count" for a qwen3 model.
func (s Shape) Key(name string) string { return s.Architecture + "." + name }

// Has reports whether the header holds the architecture-relative key name (one of
// the Key* constants Shape reads).
func (s Shape) Has(name string) bool {
	i := slices.Index(archKeys, name)
	return i >= 0 && s.present&(1<<i) != 0
}

// Require returns an error wrapping ErrNotFound that names the first of the
// architecture-relative keys (Key* constants) the header does not hold, or nil when
// it holds them all.
func (s Shape) Require(names ...string) error {
	for _, name := range names {
		if !slices.Contains(archKeys, name) {
			return fmt.Errorf("gguf: Shape does not read key %q", name)
		}
		if !s.Has(name) {
			return fmt.Errorf("gguf: key %q: %w", s.Key(name), ErrNotFound)
		}
	}
	return nil
}

// KVBytesPerToken is what one token takes in llama.cpp's KV cache at elemBytes per
// element (2 for its default F16 cache): a key of KeyLength and a value of
// ValueLength for each of KVHeads heads, in every layer. 114688 bytes (112 KiB) for
// Qwen3-Embedding-0.6B. Where the KV head count varies by layer it is an upper
// bound, since KVHeads is the largest.
func (s Shape) KVBytesPerToken(elemBytes int) int64 {
	return int64(s.Layers) * int64(s.KVHeads) * int64(s.KeyLength+s.ValueLength) * int64(elemBytes)
}

// ReadShape opens the GGUF file at path and reads its Shape.
func ReadShape(path string) (Shape, error) {
	f, err := Open(path)
	if err != nil {
		return Shape{}, err
	}
	defer f.Close()
	return f.Shape()
}

// Shape reads the model's shape from the header. It fails when general.architecture
// is absent or any key it reads holds a value of the wrong type (naming the key);
// absent keys take llama.cpp's defaults, or 0 (see Require).
func (f *File) Shape() (Shape, error) {
	s := Shape{Pooling: PoolingUnspecified, EOS: -1, RopeFreqBase: 10000}
	var err error
	if s.Architecture, err = f.String(KeyArchitecture); err != nil {
		return Shape{}, err
	}
	for i, name := range archKeys {
		if _, ok := f.values[s.Key(name)]; ok {
			s.present |= 1 << i
		}
	}
	// optional reads key into dst when present; the first error is kept.
	optional := func(key string, read func(string) error) {
		if err != nil {
			return
		}
		if _, ok := f.values[key]; ok {
			err = read(key)
		}
	}
	count := func(dst *int) func(string) error {
		return func(key string) error {
			v, e := f.uint32OrMax(key)
			*dst = int(v)
			return e
		}
	}
	float := func(dst *float32) func(string) error {
		return func(key string) (e error) { *dst, e = f.Float32(key); return e }
	}
	optional(KeyName, func(key string) (e error) { s.Name, e = f.String(key); return e })
	optional(KeyBaseName, func(key string) (e error) { s.BaseName, e = f.String(key); return e })
	for _, k := range []struct {
		name string
		dst  *int
	}{
		{KeyContextLength, &s.ContextLength},
		{KeyEmbeddingLength, &s.EmbeddingLength},
		{KeyFeedForwardLength, &s.FeedForwardLength},
		{KeyBlockCount, &s.Layers},
		{KeyHeadCount, &s.Heads},
	} {
		optional(s.Key(k.name), count(k.dst))
	}
	// llama.cpp's defaults, which depend on the counts just read.
	s.KVHeads = s.Heads
	if s.Heads > 0 {
		s.KeyLength = s.EmbeddingLength / s.Heads
		s.ValueLength = s.EmbeddingLength / s.Heads
	}
	optional(s.Key(KeyHeadCountKV), count(&s.KVHeads))
	optional(s.Key(KeyKeyLength), count(&s.KeyLength))
	optional(s.Key(KeyValueLength), count(&s.ValueLength))
	s.RopeDimensions = s.KeyLength
	optional(s.Key(KeyRopeDimensions), count(&s.RopeDimensions))
	optional(s.Key(KeyRMSEpsilon), float(&s.RMSEpsilon))
	optional(s.Key(KeyRopeFreqBase), float(&s.RopeFreqBase))
	optional(s.Key(KeyRopeScalingType), func(key string) (e error) { s.RopeScalingType, e = f.String(key); return e })
	optional(s.Key(KeyRopeScalingFactor), float(&s.RopeScalingFactor))
	optional(s.Key(KeyPoolingType), func(key string) error {
		v, e := f.Uint32(key)
		s.Pooling = Pooling(int32(v))
		return e
	})
	optional(s.Key(KeyClassifierLabels), func(key string) (e error) { s.ClassifierLabels, e = f.Strings(key); return e })
	optional(KeyTokenizerModel, func(key string) error {
		v, e := f.String(key)
		if s.Vocab = VocabType(v); v == "no_vocab" {
			s.Vocab = VocabNone
		}
		return e
	})
	optional(KeyEOSTokenID, func(key string) error {
		v, e := f.Uint32(key)
		s.EOS = int(v)
		return e
	})
	if err != nil {
		return Shape{}, err
	}
	if t, ok := f.Tensor(TensorTokenEmbedding); ok && len(t.Dims) == 2 && t.Dims[1] <= 1<<31-1 {
		s.VocabSize = int(t.Dims[1])
	}
	if t, ok := f.Tensor(TensorClassifier); ok {
		s.HasClassifier, s.ClassifierDims = true, t.Dims
	}
	if t, ok := f.Tensor(TensorClassifierDense); ok {
		s.DenseDims = t.Dims
	}
	return s, nil
}

// uint32OrMax reads a count given either once for the model or per layer (an
// integer array, as llama.cpp's get_key_or_arr takes for head counts); for an array
// it is the largest.
func (f *File) uint32OrMax(key string) (uint32, error) {
	v, err := f.Uint32(key)
	if err == nil {
		return v, nil
	}
	a, aerr := f.Int32s(key)
	if aerr != nil || len(a) == 0 {
		return 0, err
	}
	if least := slices.Min(a); least < 0 {
		return 0, fmt.Errorf("gguf: key %q holds %d, want counts of zero or more", key, least)
	}
	return uint32(slices.Max(a)), nil
}

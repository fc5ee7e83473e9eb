// Package modelinfo says what a GGUF model is, as embed-stack serves it, from its
// header alone (no weights are loaded): its dimension, training context, declared
// pooling, end-of-sequence id and name, and whether it is served as an embedding
// model or a Qwen3-Reranker. It refuses models embed-stack would serve wrongly: a
// pooling other than last-token (unless allowed), and a vocabulary whose control
// tokens are not at the ids routing writes them as.
//
// It reads the header through gguf.Shape and refuses to know how a model is loaded
// or run (backends), how memory is sized (backends.Capacity) or how requests are
// routed; serve and embed call it before they start any worker.
package modelinfo

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// Values of serve's --task: what a model is served as.
const (
	// TaskAuto decides from the GGUF (see Read).
	TaskAuto = "auto"
	// TaskEmbed serves an embedding model.
	TaskEmbed = "embed"
	// TaskRerank serves a Qwen3-Reranker.
	TaskRerank = "rerank"
)

// ParseTask checks a --task value; "" is TaskAuto.
func ParseTask(s string) (string, error) {
	switch s {
	case "", TaskAuto:
		return TaskAuto, nil
	case TaskEmbed, TaskRerank:
		return s, nil
	}
	return "", fmt.Errorf("--task %q is not one of auto, embed, rerank", s)
}

// Facts are what serve and embed need to know about a model before any worker
// loads it.
type Facts struct {
	// Path is the GGUF file read.
	Path string
	// Name is general.name as a slug ("qwen3-embedding-0.6b"); "" when absent.
	Name string
	// Dim is the native dimension (embedding_length).
	Dim int
	// TrainContext is the training context in tokens; 0 when the header does not
	// say.
	TrainContext int
	// Pooling is the declared pooling type; PoolingMismatch says it is not
	// last-token and was allowed anyway (Options.AllowPoolingMismatch).
	Pooling         gguf.Pooling
	PoolingMismatch bool
	// EOS is tokenizer.ggml.eos_token_id; -1 when absent.
	EOS int
	// Rerank says the model is served as a Qwen3-Reranker.
	Rerank bool
	// Shape is the header the facts were read from.
	Shape gguf.Shape
}

// Options say how Read judges a model.
type Options struct {
	// Task is TaskAuto (or ""), TaskEmbed or TaskRerank.
	Task string
	// AllowPoolingMismatch serves an embedding model that declares a pooling
	// other than last-token; its vectors are last-token pooled all the same.
	AllowPoolingMismatch bool
}

// Read reads the facts of the GGUF at path. Whether it is a reranker follows
// o.Task: embed and rerank say so; auto takes a GGUF for a reranker when it is laid
// out as llama.cpp's conversion writes a Qwen3-Reranker: rank pooling declared, or
// a classifier head (cls.output.weight). A Qwen3-Reranker converted as a plain
// causal LM looks like any Qwen3 model and needs TaskRerank.
//
// An embedding model that declares a pooling other than last-token is refused
// unless o.AllowPoolingMismatch: last-token pooling is what Qwen3-Embedding was
// trained with and what the engine computes, and another declared pooling type
// means another kind of model. A reranker's score is read at the last token
// whatever pooling it declares (llama.cpp's conversion declares rank).
func Read(path string, o Options) (*Facts, error) {
	s, err := gguf.ReadShape(path)
	if err == nil {
		err = s.Require(gguf.KeyEmbeddingLength)
	}
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	task, err := ParseTask(o.Task)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	f := &Facts{Path: path, Name: Slug(s.Name), Dim: s.EmbeddingLength, TrainContext: s.ContextLength, Pooling: s.Pooling, EOS: s.EOS, Shape: s}
	switch task {
	case TaskAuto:
		f.Rerank = s.HasClassifier || s.Pooling == gguf.PoolingRank
	case TaskRerank:
		f.Rerank = true
	}
	if s.Pooling != gguf.PoolingUnspecified && s.Pooling != gguf.PoolingLast && !f.Rerank {
		if !o.AllowPoolingMismatch {
			return nil, fmt.Errorf("model %s declares pooling type %d (%s); embed-stack computes last-token (%d) pooling, as Qwen3-Embedding uses. Pass --allow-pooling-mismatch only if the model was trained with last-token pooling all the same", path, s.Pooling, s.Pooling, gguf.PoolingLast)
		}
		f.PoolingMismatch = true
	}
	return f, nil
}

// Outputs is how many numbers a worker returns per sequence: the dimension, or for
// a reranker the two logits of yes and no.
func (f *Facts) Outputs() int {
	if f.Rerank {
		return 2
	}
	return f.Dim
}

// ServedName is the name the model is served under when none is given: its
// general.name as a slug, else a generic one by task.
func (f *Facts) ServedName() string {
	switch {
	case f.Name != "":
		return f.Name
	case f.Rerank:
		return "qwen3-reranker"
	}
	return "qwen3-embedding"
}

// TaskName names the model's task in GET /info: "embedding" or "rerank".
func (f *Facts) TaskName() string {
	if f.Rerank {
		return "rerank"
	}
	return "embedding"
}

// kvCacheElemBytes is the size of one element of a worker's KV cache: F16, and
// BF16 for the flash-attention context's V cache, both 2 bytes.
const kvCacheElemBytes = 2

// KVBytesPerToken is what one token costs in a worker's KV cache: K and V in every
// layer, for the model's KV heads (gguf.Shape.KVBytesPerToken). 114688 bytes (112
// KiB) for Qwen3-Embedding-0.6B. A header without the layer and head counts cannot
// be sized, and is refused here, when memory is sized, rather than by Read.
func (f *Facts) KVBytesPerToken() (int64, error) {
	if err := f.Shape.Require(gguf.KeyBlockCount, gguf.KeyHeadCount, gguf.KeyEmbeddingLength); err != nil {
		return 0, fmt.Errorf("model %s: %w", f.Path, err)
	}
	return f.Shape.KVBytesPerToken(kvCacheElemBytes), nil
}

// CheckVocabulary refuses a tokenizer whose control tokens are not at the ids
// routing writes them as: <|endoftext|>, which closes every sequence (as
// Qwen3-Embedding was trained; another token there is not a Qwen3 vocabulary, and
// every vector would end on the wrong token), and for a reranker the chat
// template's <|im_start|>, <|im_end|>, <think> and </think>.
func (f *Facts) CheckVocabulary(tok *tokenizer.Tokenizer) error {
	if id, ok := tok.TokenID("<|endoftext|>"); !ok || id != routing.EOS {
		return fmt.Errorf("its vocabulary has no <|endoftext|> token at id %d (the end-of-text id every sequence is closed with); embed-stack serves Qwen3-Embedding models", routing.EOS)
	}
	if !f.Rerank {
		return nil
	}
	for _, ct := range []struct {
		text string
		id   int32
	}{{"<|im_start|>", routing.ImStart}, {"<|im_end|>", routing.ImEnd}, {"<think>", routing.Think}, {"</think>", routing.ThinkEnd}} {
		if id, ok := tok.TokenID(ct.text); !ok || id != ct.id {
			return fmt.Errorf("its vocabulary has no %s token at id %d, which the Qwen3-Reranker template needs; embed-stack reranks with Qwen3-Reranker models", ct.text, ct.id)
		}
	}
	return nil
}

var slugRe = regexp.MustCompile(`[^a-z0-9.]+`)

// Slug turns "Qwen3 Embedding 0.6B" into "qwen3-embedding-0.6b".
func Slug(s string) string {
	return strings.Trim(slugRe.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// Package modelinfo says what a GGUF model is, as embed-stack serves it, from its
// header alone (no weights are loaded): its architecture and family (package
// family), dimension, context, pooling, prompt convention, the special tokens its
// inputs are framed in, end-of-sequence id and name, and whether it is served as an
// embedding model or a Qwen3-Reranker. It refuses models embed-stack would serve
// wrongly: an architecture it does not know (unless --pooling says how to pool it),
// a pooling it does not compute, a model that declares none where its family has no
// convention (a decoder-only chat model), and a vocabulary whose special tokens are
// not where routing writes them.
//
// It reads the header through gguf.Shape and refuses to know how a model is loaded
// or run (backends), how memory is sized (backends.Capacity) or how requests are
// routed; serve and embed call it before they start any worker.
package modelinfo

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/embed-stack/embed-stack/family"
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
	// TaskRerank serves a reranker: a Qwen3-Reranker, or an encoder
	// cross-encoder (CrossEncoder).
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
	// Arch is the architecture as embed-stack serves it (family.Lookup; an
	// unknown one, served with --pooling, is a causal decoder).
	Arch family.Arch
	// Dim is the native dimension (embedding_length).
	Dim int
	// TrainContext is the training context in tokens; 0 when the header does not
	// say.
	TrainContext int
	// MaxTokens is the longest input the model takes: its training context (32768
	// when the header does not say, 512 for an encoder), for an encoder at most
	// what one call's attention holds (family.EncoderMaxTokens).
	MaxTokens int
	// Pooling is how the model's vectors are pooled: mean, cls or last (last for
	// a reranker). DeclaredPooling is the header's (PoolingUnspecified when
	// absent), and PoolingFrom says where Pooling came from: "model" (declared),
	// "family" (the architecture's convention) or "--pooling".
	Pooling         gguf.Pooling
	DeclaredPooling gguf.Pooling
	PoolingFrom     string
	// Prompts are the model's prompt convention (family.Recognize, or --prompts).
	Prompts family.Prompts
	// Vocab is the tokenizer type (tokenizer.ggml.model).
	Vocab gguf.VocabType
	// EOS is tokenizer.ggml.eos_token_id; -1 when absent.
	EOS int
	// Rerank says the model is served as a reranker: a Qwen3-Reranker, or with
	// CrossEncoder an encoder cross-encoder (bge-reranker, ms-marco MiniLM,
	// jina-reranker-v1), whose score is its classifier head (CrossEncoderHead) over
	// the first token's state of `[CLS] query [SEP] document [SEP]`.
	Rerank       bool
	CrossEncoder bool
	// CrossEncoderHead is a cross-encoder's head, as llama.cpp's rank pooling
	// computes it (family.Arch.CrossEncoderHead); zero for other models.
	CrossEncoderHead family.Head
	// Shape is the header the facts were read from.
	Shape gguf.Shape
}

// Options say how Read judges a model.
type Options struct {
	// Task is TaskAuto (or ""), TaskEmbed or TaskRerank.
	Task string
	// Pooling, when not "", is how the model's vectors are pooled whatever its
	// header declares: "mean", "cls" or "last" (serve's --pooling).
	Pooling string
	// AllowPoolingMismatch is the older spelling of Pooling "last" (serve's
	// --allow-pooling-mismatch): it serves a model declaring another pooling
	// last-token pooled.
	AllowPoolingMismatch bool
	// Prompts names the prompt convention (family.PromptSets); "" or "auto"
	// recognizes it from the architecture and name (family.Recognize).
	Prompts string
}

// Read reads the facts of the GGUF at path. Whether it is a reranker follows
// o.Task: embed and rerank say so; auto takes a GGUF for a reranker when it is laid
// out as llama.cpp's conversion writes a Qwen3-Reranker: rank pooling declared, or
// a classifier head (cls.output.weight, or jina-bert-v2's one-row cls.weight:
// family.Arch.HasRankHead). A Qwen3-Reranker converted as a plain causal LM looks
// like any Qwen3 model and needs TaskRerank. An encoder GGUF taken for a reranker
// is a cross-encoder (CrossEncoder: bge-reranker, ms-marco MiniLM, jina-reranker-v1)
// when llama.cpp's rank pooling scores a pair with its classifier head
// (family.Arch.CrossEncoderHead: bert, neo-bert and jina-bert-v2, each with the
// tensors llama.cpp loads for it and one output); any other is refused, naming
// those architectures.
//
// An embedding model's pooling is o.Pooling when given, else what its header
// declares (mean, cls or last; rank is a reranker's, refused), else its
// architecture's convention (nomic-bert pools the mean); a model that declares
// none and has no convention (a Qwen3 or BERT conversion that lost it, a
// decoder-only chat model) is refused unless o.Pooling says, as is an
// architecture family.Archs does not list.
func Read(path string, o Options) (*Facts, error) {
	f, err := read(path, o)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	return f, nil
}

func read(path string, o Options) (*Facts, error) {
	s, err := gguf.ReadShape(path)
	if err == nil {
		err = s.Require(gguf.KeyEmbeddingLength)
	}
	if err != nil {
		return nil, err
	}
	task, err := ParseTask(o.Task)
	if err != nil {
		return nil, err
	}
	var override gguf.Pooling = gguf.PoolingUnspecified
	switch {
	case o.Pooling != "":
		if override, err = ParsePooling(o.Pooling); err != nil {
			return nil, err
		}
	case o.AllowPoolingMismatch:
		override = gguf.PoolingLast
	}
	arch, known := family.Lookup(s.Architecture)
	if !known && override == gguf.PoolingUnspecified {
		return nil, fmt.Errorf("its architecture %q is not one embed-stack serves (%s); a decoder-only model can be served as an embedding model all the same with --pooling last, mean or cls", s.Architecture, family.Names())
	}
	f := &Facts{Path: path, Name: Slug(s.Name), Arch: arch, Dim: s.EmbeddingLength, TrainContext: s.ContextLength,
		DeclaredPooling: s.Pooling, Vocab: s.Vocab, EOS: s.EOS, Shape: s}
	switch task {
	case TaskAuto:
		f.Rerank = arch.HasRankHead(s) || s.Pooling == gguf.PoolingRank
	case TaskRerank:
		f.Rerank = true
	}
	if f.Rerank && arch.Name != "qwen3" {
		why := "a classifier head"
		switch {
		case task == TaskRerank:
			why = "--task rerank"
		case s.Pooling == gguf.PoolingRank:
			why = "rank pooling declared"
		}
		if !arch.Encoder {
			return nil, fmt.Errorf("it is a %s reranker (%s); embed-stack reranks with Qwen3-Reranker models and the cross-encoders of %s. Pass --task embed to serve it as an embedding model", s.Architecture, why, family.CrossEncoderNames())
		}
		if f.CrossEncoderHead, err = arch.CrossEncoderHead(s); err != nil {
			return nil, fmt.Errorf("it is a %s reranker (%s): %w. Pass --task embed to serve it as an embedding model", s.Architecture, why, err)
		}
		f.CrossEncoder = true
	}
	if err := f.pool(override, o.AllowPoolingMismatch && o.Pooling == ""); err != nil {
		return nil, err
	}
	f.MaxTokens = maxTokens(arch, s)
	switch o.Prompts {
	case "", "auto":
		f.Prompts = family.Recognize(s.Architecture, s.Name+" "+s.BaseName)
	default:
		p, ok := family.PromptsNamed(o.Prompts)
		if !ok {
			return nil, fmt.Errorf("--prompts %q is not one of auto, %s", o.Prompts, family.PromptNames())
		}
		f.Prompts = p
	}
	return f, nil
}

// ParsePooling reads a --pooling value: mean, cls or last.
func ParsePooling(s string) (gguf.Pooling, error) {
	p, err := gguf.ParsePooling(s)
	if err != nil || (p != gguf.PoolingMean && p != gguf.PoolingCLS && p != gguf.PoolingLast) {
		return gguf.PoolingUnspecified, fmt.Errorf("--pooling %q is not one of mean, cls, last", s)
	}
	return p, nil
}

// pool sets f.Pooling from the override (PoolingUnspecified for none), the
// header and the architecture's convention; mismatch says the override is
// --allow-pooling-mismatch's, which applies to embedding models declaring another
// pooling only.
func (f *Facts) pool(override gguf.Pooling, mismatch bool) error {
	declared := f.DeclaredPooling
	switch {
	case f.CrossEncoder:
		// A cross-encoder's head reads the [CLS] state, as llama.cpp's rank
		// pooling does.
		if override != gguf.PoolingUnspecified && override != gguf.PoolingCLS && !mismatch {
			return fmt.Errorf("--pooling %s: a cross-encoder's classifier head reads its [CLS] token", override)
		}
		f.Pooling, f.PoolingFrom = gguf.PoolingCLS, "model"
		return nil
	case f.Rerank:
		// A Qwen3-Reranker's score is read at the last token, whatever it
		// declares (llama.cpp's conversion declares rank).
		if override != gguf.PoolingUnspecified && override != gguf.PoolingLast && !mismatch {
			return fmt.Errorf("--pooling %s: a Qwen3-Reranker's score is read at its last token", override)
		}
		f.Pooling, f.PoolingFrom = gguf.PoolingLast, "model"
		return nil
	case override != gguf.PoolingUnspecified:
		f.Pooling, f.PoolingFrom = override, "--pooling"
		return nil
	}
	switch declared {
	case gguf.PoolingMean, gguf.PoolingCLS, gguf.PoolingLast:
		f.Pooling, f.PoolingFrom = declared, "model"
		return nil
	case gguf.PoolingUnspecified, gguf.PoolingNone:
		if f.Arch.Pooling != gguf.PoolingUnspecified {
			f.Pooling, f.PoolingFrom = f.Arch.Pooling, "family"
			return nil
		}
		what := "declares no pooling type"
		if declared == gguf.PoolingNone {
			what = "declares pooling type 0 (none: one vector per token)"
		}
		return fmt.Errorf("it %s (%s), so it is not known how its vectors are made: a decoder-only chat model has none, and a %s embedding model should (Qwen3-Embedding's GGUFs declare last). Pass --pooling last, mean or cls to serve it all the same", what, f.Shape.Key(gguf.KeyPoolingType), f.Arch.Name)
	}
	return fmt.Errorf("it declares pooling type %d (%s); embed-stack pools mean, cls or last. Pass --pooling to serve it with one of those", declared, declared)
}

// maxTokens is Facts.MaxTokens for a model of architecture a and shape s.
func maxTokens(a family.Arch, s gguf.Shape) int {
	ctx := s.ContextLength
	switch {
	case ctx > 0:
	case a.Encoder:
		ctx = 512
	default:
		ctx = 32768
	}
	if a.Encoder {
		ctx = min(ctx, family.EncoderMaxTokens(s.Heads, family.DefaultAttentionBytes))
	}
	return ctx
}

// WorkerPooling is the --pooling a worker must be started with to pool as f
// says: "" where the engine's default (the header's mean, cls or last, else last)
// is already Pooling.
func (f *Facts) WorkerPooling() string {
	engine := f.DeclaredPooling
	if engine != gguf.PoolingMean && engine != gguf.PoolingCLS && engine != gguf.PoolingLast {
		engine = gguf.PoolingLast
	}
	if f.Rerank || f.Pooling == engine {
		return ""
	}
	return f.Pooling.String()
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
// general.name as a slug, else a generic one by task and architecture.
func (f *Facts) ServedName() string {
	switch {
	case f.Name != "":
		return f.Name
	case f.CrossEncoder:
		return Slug(f.Arch.Name) + "-reranker"
	case f.Rerank:
		return "qwen3-reranker"
	case f.Arch.Name == "" || f.Arch.Name == "qwen3":
		return "qwen3-embedding"
	}
	return Slug(f.Arch.Name) + "-embedding"
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

// CheckVocabulary refuses a Qwen3 tokenizer whose control tokens are not at the
// ids routing writes them as: <|endoftext|>, which closes every sequence (as
// Qwen3-Embedding was trained; another token there is not a Qwen3 vocabulary, and
// every vector would end on the wrong token), and for a reranker the chat
// template's <|im_start|>, <|im_end|>, <think> and </think>. Models of other
// families are checked by Frame.
func (f *Facts) CheckVocabulary(tok *tokenizer.Tokenizer) error {
	if id, ok := tok.TokenID("<|endoftext|>"); !ok || id != routing.EOS {
		return fmt.Errorf("its vocabulary has no <|endoftext|> token at id %d (the end-of-text id every sequence is closed with); embed-stack serves Qwen3-Embedding models", routing.EOS)
	}
	if !f.Rerank || f.CrossEncoder {
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

// Frame returns the special tokens every input of the model is framed in, read
// from its tokenizer (llama.cpp's rule, as the model's Hugging Face tokenizer's
// post-processor adds them):
//
//   - Qwen3 (qwen3): <|endoftext|> after the text, whatever the GGUF's
//     add_eos_token says, as Qwen3-Embedding was trained and pools it
//     (CheckVocabulary);
//   - WordPiece (BERT, nomic-bert): [CLS] text [SEP];
//   - every other vocabulary as its GGUF's add_bos_token and add_eos_token say:
//     XLM-R's <s> text </s>, T5's text </s>.
//
// Its Sep joins a cross-encoder's pair: [SEP] for WordPiece, the tail twice
// (XLM-R's </s></s>) otherwise.
func (f *Facts) Frame(tok *tokenizer.Tokenizer) (routing.Frame, error) {
	if f.Arch.Name == "qwen3" {
		if err := f.CheckVocabulary(tok); err != nil {
			return routing.Frame{}, err
		}
		return routing.Qwen3Frame, nil
	}
	sp := tok.Special()
	var fr routing.Frame
	var names []string
	add := func(ids *[]int32, id int32, what string) error {
		if id < 0 {
			return fmt.Errorf("its tokenizer adds a %s token but the GGUF names none (tokenizer.ggml.*_token_id)", what)
		}
		*ids = append(*ids, id)
		text, err := tok.Decode([]int32{id})
		if err != nil || text == "" {
			text = fmt.Sprintf("token %d", id)
		}
		names = append(names, text)
		return nil
	}
	var err error
	switch {
	case sp.AddBOS && tok.Kind() == gguf.VocabWPM:
		err = add(&fr.Head, sp.CLS, "CLS")
	case sp.AddBOS:
		err = add(&fr.Head, sp.BOS, "BOS")
	}
	if err != nil {
		return routing.Frame{}, err
	}
	switch {
	case sp.AddSEP:
		err = add(&fr.Tail, sp.SEP, "SEP")
	case sp.AddEOS:
		err = add(&fr.Tail, sp.EOS, "EOS")
	}
	if err != nil {
		return routing.Frame{}, err
	}
	// A pair (a cross-encoder's query and document) is joined as Hugging Face's
	// post-processors join one: BERT's [SEP] once, RoBERTa's (XLM-R's) </s> twice.
	fr.Sep = slices.Clone(fr.Tail)
	if tok.Kind() != gguf.VocabWPM {
		fr.Sep = append(fr.Sep, fr.Tail...)
	}
	fr.Text = strings.Join(names, " and ")
	if fr.Text == "" {
		fr.Text = "no special tokens"
	}
	return fr, nil
}

var slugRe = regexp.MustCompile(`[^a-z0-9.]+`)

// Slug turns "Qwen3 Embedding 0.6B" into "qwen3-embedding-0.6b".
func Slug(s string) string {
	return strings.Trim(slugRe.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

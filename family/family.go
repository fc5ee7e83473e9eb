// Package family is what embed-stack knows of the model families it serves, from a
// GGUF's header alone: which architectures it serves and how llama.cpp runs each (a
// causal decoder over a KV cache, or an encoder attending both ways over one call),
// the pooling an architecture's models use when their GGUF does not say, the
// classifier head llama.cpp scores its cross-encoders with (RankHead), and the
// prompt conventions of the families built on them (Qwen3-Embedding's instruction,
// nomic's task prefixes, E5's "query: " and "passage: ", BGE's query instruction,
// EmbeddingGemma's task prompts), recognised from the architecture and the model's
// name.
//
// It is a table, and refuses to know how a model is loaded, tokenized or routed:
// modelinfo reads a model's facts with it, the engine (backends/llama) takes from it
// which architectures are encoders and how a cross-encoder's head is laid out
// (CrossEncoderHead, one rule for both), and the embed-stack command turns its prompts
// into routing's.
package family

import (
	"regexp"
	"slices"
	"strings"

	"github.com/embed-stack/embed-stack/gguf"
)

// Arch is one architecture embed-stack serves (general.architecture), as llama.cpp
// runs it.
type Arch struct {
	// Name is general.architecture: "qwen3", "bert".
	Name string
	// Encoder says llama.cpp runs it without a KV cache, attending both ways over
	// the tokens of one call (llama_encode): a sequence is never split over calls,
	// every token is an output, and the longest sequence is bounded by the
	// attention of one call (EncoderMaxTokens). Otherwise it is a causal decoder.
	Encoder bool
	// Flash says llama.cpp's graph can use flash attention. T5's relative
	// position bias is added to the attention scores, which ggml's flash attention
	// does not take, so llama.cpp computes them out over every token of a call and
	// a sequence packed with others would not get the vector it gets alone.
	Flash bool
	// Pooling is what its models pool when their GGUF declares no pooling_type;
	// gguf.PoolingUnspecified where there is no such convention, and the model is
	// refused unless --pooling says.
	Pooling gguf.Pooling
	// Models names a few of the models built on it, for messages and docs.
	Models string
	// RankHead is the classifier head llama.cpp reads for its cross-encoders
	// (RankHeadNone where it reads none, and such a reranker is refused), and
	// Rerankers names a few of them, for messages.
	RankHead  RankHead
	Rerankers string
}

// Archs are the architectures embed-stack serves, in the order messages list them.
// gemma-embedding's two dense projections after pooling (sentence-transformers'
// 2_Dense and 3_Dense, dense_2 and dense_3 in the GGUF) are linear and without bias,
// and llama.cpp applies them to every token's output when the context pools nothing,
// so the engine's mean of those outputs is the projection of the mean, as llama.cpp's
// pooled graph computes it (docs/models.md).
// Every one of them is run by llama.cpp as pinned in go.mod (llama-arch.cpp); the
// encoders are those llama_model::create_memory gives no KV cache, and t5encoder,
// whose graph reads none.
var Archs = []Arch{
	{Name: "qwen3", Flash: true, Pooling: gguf.PoolingUnspecified, Models: "Qwen3-Embedding 0.6B, 4B, 8B, Qwen3-Reranker"},
	{Name: "bert", Encoder: true, Flash: true, Pooling: gguf.PoolingUnspecified, Models: "all-MiniLM, BGE, E5, mxbai-embed-large, snowflake-arctic-embed, bge-m3",
		RankHead: RankHeadPooled, Rerankers: "bge-reranker, ms-marco MiniLM"},
	{Name: "nomic-bert", Encoder: true, Flash: true, Pooling: gguf.PoolingMean, Models: "nomic-embed-text v1, v1.5"},
	{Name: "nomic-bert-moe", Encoder: true, Flash: true, Pooling: gguf.PoolingMean, Models: "nomic-embed-text v2 MoE"},
	{Name: "neo-bert", Encoder: true, Flash: true, Pooling: gguf.PoolingCLS, Models: "NeoBERT", RankHead: RankHeadPooled},
	{Name: "jina-bert-v2", Encoder: true, Flash: true, Pooling: gguf.PoolingMean, Models: "jina-embeddings-v2",
		RankHead: RankHeadOneRow, Rerankers: "jina-reranker-v1"},
	{Name: "jina-bert-v3", Encoder: true, Flash: true, Pooling: gguf.PoolingMean, Models: "jina-embeddings-v3"},
	{Name: "gemma-embedding", Encoder: true, Flash: true, Pooling: gguf.PoolingMean, Models: "EmbeddingGemma"},
	{Name: "t5encoder", Encoder: true, Flash: false, Pooling: gguf.PoolingMean, Models: "sentence-T5, T5 encoders"},
}

// Lookup returns the architecture named name, and whether embed-stack serves it.
func Lookup(name string) (Arch, bool) {
	i := slices.IndexFunc(Archs, func(a Arch) bool { return a.Name == name })
	if i < 0 {
		return Arch{Name: name, Flash: true, Pooling: gguf.PoolingUnspecified}, false
	}
	return Archs[i], true
}

// Names lists the architectures embed-stack serves, comma-separated, for messages.
func Names() string {
	names := make([]string, len(Archs))
	for i, a := range Archs {
		names[i] = a.Name
	}
	return strings.Join(names, ", ")
}

// DefaultAttentionBytes bounds the attention scores of one call of an encoder's
// long sequence (and of a decoder's: backends/llama.DefaultAttentionBytes is this
// value): without flash attention llama.cpp materialises them as an f32 matrix of
// tokens x tokens x heads per layer.
const DefaultAttentionBytes = 512 << 20

// EncoderMaxTokens is the longest sequence an encoder with heads attention heads
// takes, a multiple of 32 tokens: a long sequence is encoded alone in one call,
// without flash attention, and that call's scores (tokens squared, per head, in
// f32) must fit budget bytes. 3328 tokens for 12 heads in 512 MiB (jina-embeddings-
// v2 is trained on 8192; nomic-embed-text's 2048 fit). The engine refuses a longer
// context, and serve caps an encoder's input limit here, so both apply one rule.
func EncoderMaxTokens(heads int, budget int64) int {
	score := func(n int) int64 { return 4 * int64(n) * int64(n) * int64(max(heads, 1)) }
	n := 32
	for score(n+32) <= budget {
		n += 32
	}
	return n
}

// Prompts are a family's prompt convention: what a query and a document are
// prefixed with before they are tokenized. Query may hold "{instruction}", which
// stands for the request's instruction or Instruction; a Query without it takes no
// instruction.
type Prompts struct {
	// Name names the convention in messages, /info and the --prompts flag.
	Name string
	// Query is the query's prefix (a template, see Prompts).
	Query string
	// Instruction is the default instruction of a Query that takes one.
	Instruction string
	// Document is the document's prefix.
	Document string
}

// Placeholder is what a Query template writes where the instruction goes.
const Placeholder = "{instruction}"

// TakesInstruction says whether p's Query has room for an instruction.
func (p Prompts) TakesInstruction() bool { return strings.Contains(p.Query, Placeholder) }

// Qwen3Instruction is the task Qwen3-Embedding's authors use for web search
// queries.
const Qwen3Instruction = "Given a web search query, retrieve relevant passages that answer the query"

// bgeQuery is the query instruction of BGE v1.5 (English), mxbai-embed-large and
// snowflake-arctic-embed v1, from their model cards.
const bgeQuery = "Represent this sentence for searching relevant passages: "

// PromptSets are the prompt conventions embed-stack knows, by name.
var PromptSets = []Prompts{
	// Qwen3-Embedding: "Instruct: {task}\nQuery:{text}", no space after "Query:"
	// (the model card's reference code); documents raw.
	{Name: "qwen3", Query: "Instruct: " + Placeholder + "\nQuery:", Instruction: Qwen3Instruction},
	// nomic-embed-text: a task prefix on every input; the instruction is the
	// task (search_query, classification, clustering).
	{Name: "nomic", Query: Placeholder + ": ", Instruction: "search_query", Document: "search_document: "},
	// E5 (e5-*-v2, multilingual-e5): "query: " and "passage: ".
	{Name: "e5", Query: "query: ", Document: "passage: "},
	// multilingual-e5-large-instruct: E5's instruction format; documents raw.
	{Name: "e5-instruct", Query: "Instruct: " + Placeholder + "\nQuery: ", Instruction: Qwen3Instruction},
	// BGE v1.5 (English), mxbai-embed-large, snowflake-arctic-embed v1: a query
	// instruction, the whole of the query's prefix; documents raw.
	{Name: "bge", Query: Placeholder, Instruction: bgeQuery},
	// BGE v1.5 (Chinese): its query instruction.
	{Name: "bge-zh", Query: Placeholder, Instruction: "为这个句子生成表示以用于检索相关文章："},
	// snowflake-arctic-embed v2: "query: " on queries, documents raw.
	{Name: "arctic-v2", Query: "query: "},
	// EmbeddingGemma: the model card's retrieval prompts.
	{Name: "gemma", Query: "task: " + Placeholder + " | query: ", Instruction: "search result", Document: "title: none | text: "},
	// jina-embeddings-v3: the retrieval task's prompts.
	{Name: "jina-v3", Query: "Represent the query for retrieving evidence documents: ", Document: "Represent the document for retrieval: "},
	// No prompts: all-MiniLM, bge-m3, jina-embeddings-v2, and any model of no
	// known family.
	{Name: "none"},
}

// PromptsNamed returns the convention called name ("auto" is not one: see
// Recognize).
func PromptsNamed(name string) (Prompts, bool) {
	i := slices.IndexFunc(PromptSets, func(p Prompts) bool { return p.Name == name })
	if i < 0 {
		return Prompts{}, false
	}
	return PromptSets[i], true
}

// PromptNames lists the conventions' names, comma-separated, for messages.
func PromptNames() string {
	names := make([]string, len(PromptSets))
	for i, p := range PromptSets {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// word matches a name's words, as Recognize reads them.
var word = regexp.MustCompile(`[a-z0-9.]+`)

// Recognize picks the prompt convention of a model from its architecture and its
// name (general.name and general.basename), lowercased and read word by word:
//
//   - the architecture decides for qwen3 (qwen3) and gemma-embedding (gemma);
//   - then the name: a word "e5" is E5 (e5-instruct with a word "instruct");
//     "bge" with a word "zh" is BGE's Chinese query instruction, with a word "en" or
//     "v1.5" its English one (bge-m3 and bge-reranker have none); "mxbai" is bge's; "arctic"
//     (snowflake-arctic-embed, whose long-context model is a nomic-bert) is bge's,
//     or arctic-v2 with a word "v2" or "v2.0";
//   - then the architecture again: nomic-bert and nomic-bert-moe are nomic's,
//     jina-bert-v3 is jina-v3's;
//   - anything else, none.
//
// The --prompts flag overrides it per model.
func Recognize(arch, name string) Prompts {
	named := func(n string) Prompts { p, _ := PromptsNamed(n); return p }
	switch arch {
	case "qwen3":
		return named("qwen3")
	case "gemma-embedding":
		return named("gemma")
	}
	words := word.FindAllString(strings.ToLower(name), -1)
	has := func(w ...string) bool {
		for _, x := range w {
			if slices.Contains(words, x) {
				return true
			}
		}
		return false
	}
	switch {
	case has("e5") && has("instruct"):
		return named("e5-instruct")
	case has("e5"):
		return named("e5")
	case has("bge") && has("zh") && !has("m3", "reranker"):
		return named("bge-zh")
	case has("bge") && has("en", "v1.5") && !has("m3", "reranker"):
		return named("bge")
	case has("mxbai"):
		return named("bge")
	case has("arctic") && has("v2", "v2.0"):
		return named("arctic-v2")
	case has("arctic"):
		return named("bge")
	}
	switch arch {
	case "nomic-bert", "nomic-bert-moe":
		return named("nomic")
	case "jina-bert-v3":
		return named("jina-v3")
	}
	return named("none")
}

package family

import (
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

func TestRecognize(t *testing.T) {
	for _, tt := range []struct{ arch, name, want string }{
		{"qwen3", "Qwen3 Embedding 0.6B", "qwen3"},
		{"qwen3", "", "qwen3"},
		{"gemma-embedding", "embeddinggemma-300m", "gemma"},
		{"nomic-bert", "nomic-embed-text-v1.5", "nomic"},
		{"nomic-bert-moe", "Nomic Embed Text V2 Moe", "nomic"},
		{"nomic-bert", "snowflake-arctic-embed-m-long", "bge"},
		{"jina-bert-v3", "jina-embeddings-v3", "jina-v3"},
		{"jina-bert-v2", "jina-embeddings-v2-base-en", "none"},
		{"bert", "e5-small-v2", "e5"},
		{"bert", "multilingual-e5-large", "e5"},
		{"bert", "Multilingual E5 Large Instruct", "e5-instruct"},
		{"llama", "e5-mistral-7b-instruct", "e5-instruct"},
		{"bert", "bge-small-en-v1.5", "bge"},
		{"bert", "BGE Base En v1.5", "bge"},
		{"bert", "bge-m3", "none"},
		{"bert", "bge-reranker-base", "none"},
		{"bert", "bge-small-zh-v1.5", "bge-zh"},
		{"bert", "mxbai-embed-large-v1", "bge"},
		{"bert", "snowflake-arctic-embed-m", "bge"},
		{"bert", "snowflake-arctic-embed-m-v2.0", "arctic-v2"},
		{"bert", "all-MiniLM-L6-v2", "none"},
		{"bert", "best5model", "none"},
		{"t5encoder", "sentence-t5-base", "none"},
		{"mistral", "", "none"},
	} {
		if got := Recognize(tt.arch, tt.name); got.Name != tt.want {
			t.Errorf("Recognize(%q, %q) = %s, want %s", tt.arch, tt.name, got.Name, tt.want)
		}
	}
}

func TestPrompts(t *testing.T) {
	for _, p := range PromptSets {
		if p.TakesInstruction() != (p.Instruction != "") {
			t.Errorf("%s: query %q takes an instruction: %v, but its default instruction is %q", p.Name, p.Query, p.TakesInstruction(), p.Instruction)
		}
		if got, ok := PromptsNamed(p.Name); !ok || got != p {
			t.Errorf("PromptsNamed(%q) = %+v, %v", p.Name, got, ok)
		}
	}
	q, _ := PromptsNamed("qwen3")
	if q.Query != "Instruct: {instruction}\nQuery:" || q.Instruction != Qwen3Instruction || q.Document != "" {
		t.Errorf("qwen3 prompts %+v", q)
	}
	if _, ok := PromptsNamed("auto"); ok {
		t.Error(`PromptsNamed("auto") found a convention`)
	}
	if got := PromptNames(); got != "qwen3, nomic, e5, e5-instruct, bge, bge-zh, arctic-v2, gemma, jina-v3, none" {
		t.Errorf("PromptNames() = %q", got)
	}
}

func TestArchs(t *testing.T) {
	if got := Names(); got != "qwen3, bert, nomic-bert, nomic-bert-moe, neo-bert, jina-bert-v2, jina-bert-v3, gemma-embedding, t5encoder" {
		t.Errorf("Names() = %q", got)
	}
	for _, a := range Archs {
		if got, ok := Lookup(a.Name); !ok || got != a {
			t.Errorf("Lookup(%q) = %+v, %v", a.Name, got, ok)
		}
		if a.Encoder == (a.Name == "qwen3") {
			t.Errorf("%s: encoder %v", a.Name, a.Encoder)
		}
	}
	if a, ok := Lookup("llama"); ok || a.Encoder || a.Pooling != gguf.PoolingUnspecified || a.Name != "llama" {
		t.Errorf("Lookup(llama) = %+v, %v; want an unknown causal decoder", a, ok)
	}
	if a, _ := Lookup("t5encoder"); a.Flash {
		t.Error("t5encoder: flash attention")
	}
}

// TestEncoderMaxTokens: one call's f32 scores, tokens squared per head, within the
// budget, in steps of 32 tokens.
func TestEncoderMaxTokens(t *testing.T) {
	for _, tt := range []struct {
		heads  int
		budget int64
		want   int
	}{
		{12, DefaultAttentionBytes, 3328}, // 4 x 3328² x 12 = 508 MiB; 3360 would be 517 MiB
		{16, DefaultAttentionBytes, 2880},
		{3, DefaultAttentionBytes, 6688},
		{12, 1, 32},
	} {
		got := EncoderMaxTokens(tt.heads, tt.budget)
		if got != tt.want {
			t.Errorf("EncoderMaxTokens(%d, %d) = %d, want %d", tt.heads, tt.budget, got, tt.want)
		}
		if tt.budget > 1 && (4*int64(got)*int64(got)*int64(tt.heads) > tt.budget || 4*int64(got+32)*int64(got+32)*int64(tt.heads) <= tt.budget) {
			t.Errorf("EncoderMaxTokens(%d) = %d is not the largest fit", tt.heads, got)
		}
	}
	if !strings.Contains(Names(), "t5encoder") {
		t.Error("Names lacks t5encoder")
	}
}

package modelrun

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/routing"
)

// TestServeRefusesModels runs serve's own path up to the model check: a model
// embed-stack would serve wrongly stops serve before any worker starts, with a
// message that names what is wrong and the flag that changes it.
func TestServeRefusesModels(t *testing.T) {
	header := func(kv map[string]any) string {
		w := gguf.NewWriter()
		for k, v := range kv {
			w.AddKV(k, v)
		}
		model := filepath.Join(t.TempDir(), "m.gguf")
		if err := w.WriteFile(model); err != nil {
			t.Fatal(err)
		}
		return model
	}
	for _, tt := range []struct {
		name string
		kv   map[string]any
		cfg  Config
		want string
	}{
		{"unsupported architecture", map[string]any{"general.architecture": "llama", "llama.embedding_length": uint32(64)}, Config{},
			`its architecture "llama" is not one embed-stack serves (qwen3, bert, nomic-bert, nomic-bert-moe, neo-bert, jina-bert-v2, jina-bert-v3, gemma-embedding, t5encoder); a decoder-only model can be served as an embedding model all the same with --pooling last, mean or cls`},
		{"a chat model: no pooling declared", map[string]any{"general.architecture": "qwen3", "qwen3.embedding_length": uint32(64)}, Config{},
			"it declares no pooling type (qwen3.pooling_type), so it is not known how its vectors are made: a decoder-only chat model has none, and a qwen3 embedding model should (Qwen3-Embedding's GGUFs declare last). Pass --pooling last, mean or cls to serve it all the same"},
		{"rank pooling for embeddings", map[string]any{"general.architecture": "qwen3", "qwen3.embedding_length": uint32(64), "qwen3.pooling_type": uint32(4)}, Config{Task: "embed"},
			"it declares pooling type 4 (rank); embed-stack pools mean, cls or last. Pass --pooling to serve it with one of those"},
		{"an input limit above the model's context", map[string]any{"general.architecture": "bert", "bert.embedding_length": uint32(64), "bert.context_length": uint32(512), "bert.pooling_type": uint32(1)},
			Config{MaxInputTokens: 1024, MaxInputSet: true}, "--max-input-tokens (1024) exceeds what the model takes (512 tokens: its training context); lower it"},
		{"a warm limit above the model's", map[string]any{"general.architecture": "bert", "bert.embedding_length": uint32(64), "bert.context_length": uint32(512), "bert.pooling_type": uint32(1)},
			Config{WarmMaxTokens: 1024, WarmMaxSet: true}, "--warm-max-tokens (1024) exceeds the model's input limit (512 tokens: its training context); lower it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			model := header(tt.kv)
			cfg := tt.cfg
			cfg.Model = model
			if cfg.MaxInputTokens == 0 {
				cfg.MaxInputTokens = 32768
			}
			if cfg.WarmMaxTokens == 0 {
				cfg.WarmMaxTokens = 8192
			}
			_, err := Prepare(t.Context(), cfg, discardLogger())
			if want := "model " + model + ": " + tt.want; err == nil || err.Error() != want {
				t.Fatalf("err = %v\nwant %s", err, want)
			}
		})
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestRoutingPrompts: a query or document prompt given by flag replaces the
// convention's and names it custom; a query prompt without {instruction} takes no
// instruction, one with it keeps the family's or, where it has none, Qwen3's.
func TestRoutingPrompts(t *testing.T) {
	qwen3 := family.Prompts{Name: "qwen3", Query: "Instruct: {instruction}\nQuery:", Instruction: "qwen task"}
	e5 := family.Prompts{Name: "e5", Query: "query: ", Document: "passage: "}
	text := func(s string) *string { return &s }
	for _, tt := range []struct {
		name            string
		p               family.Prompts
		query, document *string
		want            routing.Prompts
	}{
		{"the convention's", qwen3, nil, nil, routing.Prompts{Family: "qwen3", Query: "Instruct: {instruction}\nQuery:", Instruction: "qwen task"}},
		{"a query prompt without instruction", qwen3, text("Q: "), nil, routing.Prompts{Family: "custom", Query: "Q: "}},
		{"a query prompt with one keeps the family's", qwen3, text("{instruction} | "), nil, routing.Prompts{Family: "custom", Query: "{instruction} | ", Instruction: "qwen task"}},
		{"a family without one takes Qwen3's", e5, text("{instruction}: "), nil, routing.Prompts{Family: "custom", Query: "{instruction}: ", Instruction: family.Qwen3Instruction, Document: "passage: "}},
		{"an empty document prompt", e5, nil, text(""), routing.Prompts{Family: "custom", Query: "query: "}},
	} {
		if got := routingPrompts(tt.p, tt.query, tt.document); got != tt.want {
			t.Errorf("%s: got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

// TestCheckEphemeralLimits: bounds under which the longest input could never run
// are refused, naming the flags to change.
func TestCheckEphemeralLimits(t *testing.T) {
	for _, tt := range []struct {
		l    backends.Capacity
		want string
	}{
		{backends.Capacity{Workers: 2, Tokens: 32768}, ""},
		{backends.Capacity{Workers: 2, Tokens: 1000}, "--max-ephemeral-tokens (1000) is below --max-input-tokens (32768): the longest inputs would only ever run alone; raise it or lower --max-input-tokens"},
		{backends.Capacity{Workers: 0, Tokens: 65536}, "--max-ephemeral must be at least 1"},
	} {
		err := checkEphemeralLimits(tt.l, 32768)
		if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && got != tt.want) {
			t.Errorf("%+v: %v, want %q", tt.l, err, tt.want)
		}
	}
	if got := capLengths([]int{256, 1024, 8192, 16384}, 4096); !slices.Equal(got, []int{256, 1024, 4096}) {
		t.Errorf("capLengths = %v, want [256 1024 4096]", got)
	}
}

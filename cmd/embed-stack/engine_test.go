package main

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
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
		cfg  engineConfig
		want string
	}{
		{"unsupported architecture", map[string]any{"general.architecture": "llama", "llama.embedding_length": uint32(64)}, engineConfig{},
			`its architecture "llama" is not one embed-stack serves (qwen3, bert, nomic-bert, nomic-bert-moe, neo-bert, jina-bert-v2, jina-bert-v3, t5encoder); a decoder-only model can be served as an embedding model all the same with --pooling last, mean or cls`},
		{"a chat model: no pooling declared", map[string]any{"general.architecture": "qwen3", "qwen3.embedding_length": uint32(64)}, engineConfig{},
			"it declares no pooling type (qwen3.pooling_type), so it is not known how its vectors are made: a decoder-only chat model has none, and a qwen3 embedding model should (Qwen3-Embedding's GGUFs declare last). Pass --pooling last, mean or cls to serve it all the same"},
		{"rank pooling for embeddings", map[string]any{"general.architecture": "qwen3", "qwen3.embedding_length": uint32(64), "qwen3.pooling_type": uint32(4)}, engineConfig{Task: "embed"},
			"it declares pooling type 4 (rank); embed-stack pools mean, cls or last. Pass --pooling to serve it with one of those"},
		{"an input limit above the model's context", map[string]any{"general.architecture": "bert", "bert.embedding_length": uint32(64), "bert.context_length": uint32(512), "bert.pooling_type": uint32(1)},
			engineConfig{MaxInputTokens: 1024, MaxInputSet: true}, "--max-input-tokens (1024) exceeds what the model takes (512 tokens: its training context); lower it"},
		{"a warm limit above the model's", map[string]any{"general.architecture": "bert", "bert.embedding_length": uint32(64), "bert.context_length": uint32(512), "bert.pooling_type": uint32(1)},
			engineConfig{WarmMaxTokens: 1024, WarmMaxSet: true}, "--warm-max-tokens (1024) exceeds the model's input limit (512 tokens: its training context); lower it"},
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
			_, err := newEngine(t.Context(), cfg, discardLogger())
			if want := "model " + model + ": " + tt.want; err == nil || err.Error() != want {
				t.Fatalf("err = %v\nwant %s", err, want)
			}
		})
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

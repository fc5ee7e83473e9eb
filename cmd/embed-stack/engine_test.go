package main

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

// writeFactsGGUF writes a GGUF holding only the metadata readModelFacts reads.
func writeFactsGGUF(t *testing.T, kv map[string]any) string {
	t.Helper()
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	w.AddKV("general.name", "Qwen3 Embedding 0.6B")
	w.AddKV("qwen3.embedding_length", uint32(1024))
	w.AddKV("qwen3.context_length", uint32(32768))
	if _, ok := kv["tokenizer.ggml.eos_token_id"]; !ok {
		w.AddKV("tokenizer.ggml.eos_token_id", uint32(151643))
	}
	for k, v := range kv {
		w.AddKV(k, v)
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadModelFacts(t *testing.T) {
	tests := []struct {
		name     string
		kv       map[string]any
		allow    bool
		task     string
		want     modelFacts
		wantErr  string
		mismatch bool
	}{
		{name: "last-token pooling", kv: map[string]any{"qwen3.pooling_type": uint32(3)},
			want: modelFacts{name: "qwen3-embedding-0.6b", dim: 1024, trainContext: 32768, pooling: 3, eosID: 151643}},
		{name: "no pooling declared", kv: nil,
			want: modelFacts{name: "qwen3-embedding-0.6b", dim: 1024, trainContext: 32768, pooling: -1, eosID: 151643}},
		{name: "mean pooling refused", kv: map[string]any{"qwen3.pooling_type": uint32(1)},
			wantErr: "declares pooling type 1 (mean); embed-stack computes last-token (3) pooling, as Qwen3-Embedding uses. Pass --allow-pooling-mismatch"},
		{name: "cls pooling refused", kv: map[string]any{"qwen3.pooling_type": uint32(2)}, wantErr: "declares pooling type 2 (cls)"},
		{name: "mean pooling allowed", kv: map[string]any{"qwen3.pooling_type": uint32(1)}, allow: true,
			want: modelFacts{name: "qwen3-embedding-0.6b", dim: 1024, trainContext: 32768, pooling: 1, poolingMismatch: true, eosID: 151643}},
		{name: "rank pooling is a reranker", kv: map[string]any{"qwen3.pooling_type": uint32(4)},
			want: modelFacts{name: "qwen3-embedding-0.6b", dim: 1024, trainContext: 32768, pooling: 4, eosID: 151643, rerank: true}},
		{name: "rank pooling served as embeddings", kv: map[string]any{"qwen3.pooling_type": uint32(4)}, task: "embed", wantErr: "declares pooling type 4 (rank)"},
		{name: "task rerank without a head", kv: map[string]any{"qwen3.pooling_type": uint32(3)}, task: "rerank",
			want: modelFacts{name: "qwen3-embedding-0.6b", dim: 1024, trainContext: 32768, pooling: 3, eosID: 151643, rerank: true}},
		{name: "unknown task", task: "classify", wantErr: `--task "classify" is not one of auto, embed, rerank`},
		{name: "other eos id", kv: map[string]any{"tokenizer.ggml.eos_token_id": uint32(151645), "qwen3.pooling_type": uint32(3)},
			want: modelFacts{name: "qwen3-embedding-0.6b", dim: 1024, trainContext: 32768, pooling: 3, eosID: 151645}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readModelFacts(writeFactsGGUF(t, tt.kv), tt.allow, tt.task)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != tt.want {
				t.Errorf("facts = %+v, want %+v", *got, tt.want)
			}
		})
	}
}

// TestServeRefusesPoolingMismatch runs serve's own path up to the model check: a
// mean-pooling GGUF must stop serve before any worker starts, naming the override.
func TestServeRefusesPoolingMismatch(t *testing.T) {
	model := writeFactsGGUF(t, map[string]any{"qwen3.pooling_type": uint32(1)})
	_, err := newEngine(t.Context(), engineConfig{Model: model, MaxInputTokens: 8192, WarmMaxTokens: 8192}, discardLogger())
	if err == nil || !strings.Contains(err.Error(), "--allow-pooling-mismatch") {
		t.Fatalf("err = %v, want a refusal naming --allow-pooling-mismatch", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

package main

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

// TestServeRefusesPoolingMismatch runs serve's own path up to the model check: a
// mean-pooling GGUF must stop serve before any worker starts, naming the override.
func TestServeRefusesPoolingMismatch(t *testing.T) {
	w := gguf.NewWriter()
	for k, v := range map[string]any{"general.architecture": "qwen3", "qwen3.embedding_length": uint32(64), "qwen3.pooling_type": uint32(1)} {
		w.AddKV(k, v)
	}
	model := filepath.Join(t.TempDir(), "mean.gguf")
	if err := w.WriteFile(model); err != nil {
		t.Fatal(err)
	}
	_, err := newEngine(t.Context(), engineConfig{Model: model, MaxInputTokens: 8192, WarmMaxTokens: 8192}, discardLogger())
	if err == nil || !strings.Contains(err.Error(), "--allow-pooling-mismatch") {
		t.Fatalf("err = %v, want a refusal naming --allow-pooling-mismatch", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

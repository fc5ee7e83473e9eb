package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/backends"
)

// TestServeFlagsWarmBackend: the three flags reach backends.WarmProgram from the command line and
// from EMBED_STACK_* variables, and are resolved (and refused) at parse time, before
// any model is downloaded.
func TestServeFlagsWarmBackend(t *testing.T) {
	dir := t.TempDir()
	server, snapshot := filepath.Join(dir, "mlx-embed-server"), filepath.Join(dir, "snapshot")
	if err := os.Mkdir(snapshot, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{server: 0o755, filepath.Join(snapshot, "config.json"): 0o644} {
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	got, err := parseServeFlags([]string{"--model", "m.gguf", "--warm-backend", "mlx", "--mlx-server", server, "--mlx-model", snapshot}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (backends.WarmProgram{Name: backends.WarmMLX, MLXServer: server, MLXModel: snapshot}); got.warm != want {
		t.Errorf("warm = %+v, want %+v", got.warm, want)
	}
	t.Setenv("EMBED_STACK_WARM_BACKEND", "mlx")
	if _, err := parseServeFlags([]string{"--model", "m.gguf"}, nil, nil); err == nil || !strings.Contains(err.Error(), "--warm-backend mlx needs --mlx-model DIR") {
		t.Errorf("EMBED_STACK_WARM_BACKEND=mlx without a model: %v; want the --mlx-model error", err)
	}
}

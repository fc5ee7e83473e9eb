package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// TestServeWarmBackendMLX: `embed-stack serve --warm-backend mlx` starts --mlx-server as
// its warm worker with the worker arguments, --model pointing at --mlx-model, and then
// serves through it. No MLX worker can run here, so --mlx-server is a stand-in script
// that records its arguments and execs `embed-stack worker` on the GGUF (the suite
// above is what makes any protocol-speaking program interchangeable with it). A serve
// started with --warm-backend mlx and no --mlx-model must refuse to start.
func TestServeWarmBackendMLX(t *testing.T) {
	bin, model := fromRoot("bin/embed-stack"), fromRoot("models/tiny.gguf")
	for _, p := range []string{bin, model} {
		if _, err := os.Stat(p); err != nil {
			if testenv.RequireE2E() {
				t.Fatalf("%v: run `make build models` first", err)
			}
			t.Skipf("%v: run `make build models` first", err)
		}
	}
	dir := t.TempDir()
	snapshot := filepath.Join(dir, "snapshot")
	if err := os.Mkdir(snapshot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snapshot, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	argsFile := filepath.Join(dir, "args")
	stub := filepath.Join(dir, "mlx-embed-server")
	// The later --model wins in Go's flag package, so the stand-in loads the GGUF.
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$@\" > %s\nexec %s worker \"$@\" --model %s\n",
		shellQuote(argsFile), shellQuote(bin), shellQuote(model))
	if err := os.WriteFile(stub, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("refused without --mlx-model", func(t *testing.T) {
		var out bytes.Buffer
		cmd := exec.Command(bin, "serve", "--model", model, "--warm-backend", "mlx", "--mlx-server", stub)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out.String(), "--warm-backend mlx needs --mlx-model DIR") {
			t.Errorf("serve without --mlx-model: %v, output %q; want exit 2 naming --mlx-model", err, out.String())
		}
	})

	srv, err := e2e.StartServe(e2e.ServeSpec{Bin: bin, Model: model,
		Flags: []string{"--threads", "1", "--warm-backend", "mlx", "--mlx-server", stub, "--mlx-model", snapshot}}, suite.readyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill() // when the test fails before its own SIGTERM below
	base, out := srv.URL, srv.Out

	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/embeddings", strings.NewReader(`{"input":["hello","world"],"model":"m"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil || len(got.Data) != 2 || len(got.Data[0].Embedding) != 64 {
		t.Errorf("POST /v1/embeddings through the stand-in: %d %s; want 2 vectors of 64", resp.StatusCode, abbreviate(body))
	}

	raw, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatalf("the stand-in never ran: %v\noutput:\n%s", err, out.String())
	}
	args := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	t.Logf("the stand-in was started with %q", args)
	want := []string{"--model", snapshot, "--threads", "1", "--log-format", "text", "--log-level", "info", "--ctx", "8192", "--buckets", "256,1024,8192", "--socket"}
	if len(args) != len(want)+1 || !slices.Equal(args[:len(want)], want) || !strings.HasSuffix(args[len(want)], ".sock") {
		t.Errorf("mlx worker arguments %q\nwant %q followed by the socket path", args, want)
	}

	if err := srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.Done():
		if err := srv.Err(); err != nil {
			t.Errorf("serve after SIGTERM: %v\noutput:\n%s", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("serve still running 30s after SIGTERM\noutput:\n%s", out)
	}
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

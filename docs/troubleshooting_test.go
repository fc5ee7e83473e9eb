package docs

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/e2e"
)

// page is troubleshooting.md with its whitespace collapsed, so that a quote wrapped
// over lines still matches.
func page(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

type apiError struct {
	status int
	header http.Header
	Error  struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func post(t *testing.T, url string, body []byte) apiError {
	t.Helper()
	resp, err := http.Post(url+"/v1/embeddings", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	e := apiError{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("status %d, body %.200q: %v", resp.StatusCode, b, err)
		}
	}
	return e
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestQuotedErrors sends the requests each section is about and requires the server's
// answer (status, code) to carry the text the page quotes.
func TestQuotedErrors(t *testing.T) {
	doc := page(t)
	s := e2e.Serve(t, "--strict-model", "--model-name", "qwen3-embedding-0.6b", "--max-body-bytes", "400000")
	const model = "qwen3-embedding-0.6b"
	long := strings.Repeat("light ", 33000) // over 32768 tokens, under the body limit
	many := make([]string, 2049)
	for i := range many {
		many[i] = "x"
	}
	tests := []struct {
		name   string
		body   []byte
		status int
		code   string
		quote  string // in the page and in the message
	}{
		{"over-length", mustJSON(map[string]any{"model": model, "input": []string{"short", long}}), 400, "context_length_exceeded",
			"This model's maximum context length is 32768 tokens, however you requested"},
		{"too many inputs", mustJSON(map[string]any{"model": model, "input": many}), 400, "too_many_inputs", "the limit is 2048 per request"},
		{"body too large", mustJSON(map[string]any{"model": model, "input": strings.Repeat("y", 500000)}), 413, "request_too_large", "--max-body-bytes"},
		{"unknown cl100k id", mustJSON(map[string]any{"model": model, "input": [][]int{{999999999}}}), 400, "invalid_token_id",
			"input 0: cl100k: token 0 is id 999999999, outside cl100k_base's range 0 to 100276 (token ids are read as tiktoken cl100k_base; start the server with --token-ids=native to send Qwen3 ids)."},
		{"strict model", mustJSON(map[string]any{"model": "text-embedding-3-small", "input": "x"}), 404, "model_not_found", "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(doc, tt.quote) {
				t.Errorf("troubleshooting.md does not quote %q", tt.quote)
			}
			e := post(t, s.URL, tt.body)
			code := ""
			if e.Error.Code != nil {
				code = *e.Error.Code
			}
			if e.status != tt.status || code != tt.code || !strings.Contains(e.Error.Message, tt.quote) {
				t.Errorf("got %d %s %q; want %d %s with %q", e.status, code, e.Error.Message, tt.status, tt.code, tt.quote)
			}
		})
	}
}

// TestQuoted503 catches the window between the API listening and the warm worker
// being ready: the page's 503 message and Retry-After must be what clients get.
func TestQuoted503(t *testing.T) {
	doc := page(t)
	const quote = "The embedding worker is not ready (starting or restarting); retry after 1s."
	if !strings.Contains(doc, quote) {
		t.Fatalf("troubleshooting.md does not quote %q", quote)
	}
	bin, model := e2e.Paths(t)
	// A large warm context makes the worker's start slow enough to be caught; a few
	// attempts make a fast machine no excuse.
	for attempt := 0; attempt < 5; attempt++ {
		addr := e2e.FreeAddr(t)
		p := e2e.Start(t, exec.Command(bin, "serve", "--model", model, "--addr", addr, "--warm-max-tokens", "32768"))
		url := "http://" + addr
		deadline := time.Now().Add(e2e.ReadyTimeout)
		for time.Now().Before(deadline) {
			if resp, err := http.Get(url + "/health"); err == nil {
				resp.Body.Close()
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		e := post(t, url, mustJSON(map[string]any{"model": "m", "input": "x"}))
		p.Stop()
		if e.status == http.StatusOK {
			continue // the worker was already ready
		}
		if e.status != http.StatusServiceUnavailable || e.Error.Code == nil || *e.Error.Code != "worker_unavailable" ||
			e.Error.Message != quote || e.header.Get("Retry-After") != "1" {
			t.Fatalf("got %d %v %q Retry-After %q; want 503 worker_unavailable %q with Retry-After 1",
				e.status, e.Error.Code, e.Error.Message, e.header.Get("Retry-After"), quote)
		}
		return
	}
	t.Fatal("the warm worker was ready before the first request in 5 attempts; no 503 to check")
}

// TestQuotedPoolingRefusal: serve refuses a Qwen3 GGUF that declares no pooling
// (a chat model) with the page's words and names the override.
func TestQuotedPoolingRefusal(t *testing.T) {
	doc := page(t)
	const quote = "declares no pooling type"
	if !strings.Contains(doc, quote) || !strings.Contains(doc, "--pooling last") {
		t.Fatalf("troubleshooting.md does not quote %q with --pooling last", quote)
	}
	bin, _ := e2e.Paths(t)
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	w.AddKV("qwen3.embedding_length", uint32(64))
	w.AddKV("qwen3.context_length", uint32(32768))
	path := filepath.Join(t.TempDir(), "chat.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "serve", "--model", path, "--addr", e2e.FreeAddr(t)).CombinedOutput()
	if e2e.ExitCode(err) != 1 || !strings.Contains(string(out), quote) || !regexp.MustCompile(`Pass --pooling last, mean or cls`).Match(out) {
		t.Fatalf("exit %v, output:\n%s\nwant exit 1 with %q and the override", err, out, quote)
	}
}

// TestQuotedCPUVariantErrors: a CPU variant this CPU lacks is refused with the
// page's words, and a missing one gives the page's warning.
func TestQuotedCPUVariantErrors(t *testing.T) {
	doc := page(t)
	for _, quote := range []string{
		"which this CPU lacks (not among the flags of /proc/cpuinfo); it would die with SIGILL. This CPU can run:",
		`msg="slower CPU kernels than this CPU allows"`,
		"instead (rebuild it with `make cpu-variants`, or remove it)",
	} {
		if !strings.Contains(doc, quote) {
			t.Errorf("troubleshooting.md does not quote %q", quote)
		}
	}
	bin, model := e2e.Paths(t)
	host := cpuvariant.ReadHost()
	for _, v := range cpuvariant.ForArch(host.Arch) {
		if len(host.Missing(v)) == 0 {
			continue
		}
		out, err := exec.Command(bin, "serve", "--model", model, "--addr", e2e.FreeAddr(t), "--cpu-variant", v.Name).CombinedOutput()
		want := "embed-stack serve: --cpu-variant: CPU variant " + v.Name + " needs "
		if e2e.ExitCode(err) != 2 || !strings.Contains(string(out), want) || !strings.Contains(string(out), "which this CPU lacks (not among the flags of /proc/cpuinfo); it would die with SIGILL. This CPU can run:") {
			t.Errorf("--cpu-variant %s: exit %v, output:\n%s", v.Name, err, out)
		}
		break
	}
	// A truncated library: the warning, and the server still answers.
	dir := t.TempDir()
	usable := ""
	for _, v := range cpuvariant.ForArch(host.Arch) {
		if len(host.Missing(v)) == 0 {
			usable = v.Name
		}
	}
	if usable == "" {
		t.Skip("this CPU runs no CPU variant")
	}
	lib := filepath.Join(dir, cpuvariant.LibraryPrefix+usable+".so")
	if err := os.WriteFile(lib, []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := e2e.Serve(t, "--backend-dir", dir, "--cpu-variant", usable)
	log := strings.Join(strings.Fields(s.Out.String()), " ")
	for _, want := range []string{`level=WARN msg="slower CPU kernels than this CPU allows" worker=warm pid=`, `cpu_variant=builtin warning="CPU variant ` + usable + " did not load from " + lib + " (a damaged ELF file, truncated or overwritten (4 bytes): EOF); running the compiled-in kernels (", "instead (rebuild it with `make cpu-variants`, or remove it)"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, s.Out.String())
		}
	}
}

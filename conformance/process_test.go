package conformance

import (
	"net/http"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// isolatedFlags start a server no other test shares (the flag restates the default), for
// tests that kill its workers.
var isolatedFlags = []string{"--default-input-type", "document"}

// waitWorkers polls until the server has exactly want worker children and returns them.
func waitWorkers(t *testing.T, s *server, want int, timeout time.Duration) []procInfo {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ws, err := childWorkers(s.Cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == want {
			return ws
		}
		if time.Now().After(deadline) {
			t.Fatalf("server has %d worker children after %s, want %d: %+v", len(ws), timeout, want, ws)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLongInputs: long inputs match the reference too — one the warm worker takes
// (≤ 8192 tokens) and one past it, which an ephemeral worker embeds and which must be
// gone afterwards. A run of one repeated token is the most sensitive input to
// attention-precision loss, which grows with length.
func TestLongInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the float64 reference of an 8.5k-token input takes seconds")
	}
	if runtime.GOOS != "linux" {
		t.Skip("counts worker processes through /proc")
	}
	s := serverWith(t, isolatedFlags...)
	for _, tc := range []struct {
		name   string
		tokens int // without EOS
	}{
		{"warm 4000", 3999},
		{"ephemeral 8500", 8499},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := repeatedText(t, tc.tokens)
			before := waitWorkers(t, s, 1, 10*time.Second)
			resp := embed(t, s.client(nil), openai.EmbeddingRequestStrings{Input: []string{"short first", text}, Model: "m"})
			if len(resp.Data) != 2 {
				t.Fatalf("%d vectors, want 2", len(resp.Data))
			}
			requireReference(t, "long input", f64(resp.Data[1].Embedding), expectDocument(t, text))
			requireReference(t, "short input", f64(resp.Data[0].Embedding), expectDocument(t, "short first"))
			if got, want := resp.Usage.PromptTokens, tc.tokens+1+len(encode(t, "short first"))+1; got != want {
				t.Errorf("prompt_tokens %d, want %d", got, want)
			}
			after := waitWorkers(t, s, 1, orphanTimeout)
			if after[0] != before[0] {
				t.Errorf("warm worker changed from %+v to %+v", before[0], after[0])
			}
		})
	}
}

// TestWorkerCrashRecovery: when the warm worker dies (SIGKILL, as a GGML_ASSERT abort
// would), the server stays up, answers either a correct 200 or a 503 with Retry-After
// meanwhile, restarts the worker, and then gives the same vectors as before.
func TestWorkerCrashRecovery(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the worker through /proc")
	}
	s := serverWith(t, isolatedFlags...)
	c := s.client(nil)
	const text = "survive the crash"
	req := openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m"}
	before := f64(embed(t, c, req).Data[0].Embedding)
	requireReference(t, "before", before, expectDocument(t, text))

	old := waitWorkers(t, s, 1, 10*time.Second)[0]
	if err := syscall.Kill(old.pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker %d: %v", old.pid, err)
	}

	// Until a new worker is ready every answer must be a correct 200 or a proper 503.
	deadline := time.Now().Add(readyTimeout)
	var saw503 int
	for {
		r := s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": text, "model": "m"}, nil)
		if r.status == http.StatusOK {
			var got rawEmbeddings
			r.decode(t, &got)
			requireSame(t, "after the restart", got.Data[0].Embedding, before)
			break
		}
		env := requireErrorEnvelope(t, r, http.StatusServiceUnavailable)
		saw503++
		if env.Error.Param != nil {
			t.Errorf("503 param %s, want null", strPtr(env.Error.Param))
		}
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || ra < 1 {
			t.Fatalf("503 Retry-After %q, want a positive number of seconds", r.header.Get("Retry-After"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("still 503 %s after killing the worker\nstderr:\n%s", readyTimeout, s.Out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d requests answered 503 while the worker restarted", saw503)

	if err := s.Ready(readyTimeout); err != nil {
		t.Fatal(err)
	}
	now := waitWorkers(t, s, 1, 10*time.Second)[0]
	if now == old {
		t.Fatalf("worker %+v was not replaced", old)
	}
	select {
	case <-s.Done():
		t.Fatalf("server exited: %v", s.Err())
	default:
	}
}

// TestReadyWhileLoading: /ready is 503 with Retry-After until the warm worker is up,
// and an embeddings request meanwhile is a 503 in OpenAI's envelope. A fresh server is
// probed from its first answer; a model that loads before the first probe leaves nothing
// to observe, which is logged rather than failed.
func TestReadyWhileLoading(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	flags := []string{"--default-input-type", "document"}
	es, err := e2e.LaunchServe(e2e.ServeSpec{Bin: binPath, Model: modelPath, Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{Server: es, flags: flags}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("%v\nstderr:\n%s", err, s.Out)
		}
	})
	seen := 0
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.URL + "/ready")
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue // not listening yet
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		seen++
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("/ready while loading: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		r := s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": "early", "model": "m"}, nil)
		if r.status != http.StatusOK {
			requireErrorEnvelope(t, r, http.StatusServiceUnavailable)
			if r.header.Get("Retry-After") == "" {
				t.Errorf("503 from /v1/embeddings without Retry-After")
			}
		}
	}
	if err := s.Ready(readyTimeout); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, s.Out)
	}
	t.Logf("/ready answered 503 %d times before the worker was up", seen)
}

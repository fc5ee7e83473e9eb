package backends

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// shortTempDir makes a private directory with a path short enough for a Unix
// socket (t.TempDir's paths embed the test name and can exceed the limit).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serveUnix serves h on a Unix socket until the test ends and returns the path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	path := filepath.Join(shortTempDir(t), "w.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return path
}

func TestClientEmbed(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	var sawTraceparent atomic.Value
	engine := &fakeEngine{embedHook: func(ctx context.Context, _ [][]int32) { sawTraceparent.Store(TraceparentFromContext(ctx)) }}
	c := NewClient(serveUnix(t, NewWorkerHandler(engine, testInfo, ready.Load)))
	defer c.Close()

	seqs := [][]int32{{1, 2, 3}, {7}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	got, err := c.Embed(ContextWithTraceparent(context.Background(), tp), seqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(seqs) {
		t.Fatalf("got %d vectors, want %d", len(got), len(seqs))
	}
	for i, s := range seqs {
		want := fakeVector(s)
		for j := range want {
			if got[i][j] != want[j] {
				t.Fatalf("vector %d = %v, want %v", i, got[i], want)
			}
		}
	}
	if got := sawTraceparent.Load(); got != tp {
		t.Errorf("the engine saw traceparent %v, want %q", got, tp)
	}

	tests := []struct {
		name  string
		seqs  [][]int32
		ready bool
		check func(t *testing.T, err error)
	}{
		{"input error keeps the index", [][]int32{{1}, {2}, {3, 4000}}, true, func(t *testing.T, err error) {
			var ie *WorkerInputError
			if !errors.As(err, &ie) || ie.Index != 2 || ie.Message != "token id 4000 is outside the vocabulary [0, 1000)" {
				t.Fatalf("err = %#v (%v), want WorkerInputError{2, token id 4000 ...}", ie, err)
			}
			if err.Error() != "worker refused sequence 2: token id 4000 is outside the vocabulary [0, 1000)" {
				t.Errorf("message %q", err.Error())
			}
		}},
		{"request-wide input error has index -1", [][]int32{}, true, func(t *testing.T, err error) {
			var ie *WorkerInputError
			if !errors.As(err, &ie) || ie.Index != -1 {
				t.Fatalf("err = %v, want a WorkerInputError with index -1", err)
			}
		}},
		{"loading is unavailable with the worker's retry hint", [][]int32{{1}}, false, func(t *testing.T, err error) {
			var ue *UnavailableError
			if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue) || ue.RetryAfter != time.Second {
				t.Fatalf("err = %v, want UnavailableError with RetryAfter 1s", err)
			}
		}},
		{"engine failure is neither input nor unavailable", [][]int32{{tokFail}}, true, func(t *testing.T, err error) {
			var ie *WorkerInputError
			if err == nil || errors.Is(err, ErrUnavailable) || errors.As(err, &ie) {
				t.Fatalf("err = %v, want a plain error", err)
			}
			want := "worker at " + c.SocketPath() + " answered 500: engine: fake decode failed"
			if err.Error() != want {
				t.Errorf("err = %q, want %q", err, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready.Store(tt.ready)
			defer ready.Store(true)
			_, err := c.Embed(context.Background(), tt.seqs)
			tt.check(t, err)
		})
	}
}

func TestClientHealth(t *testing.T) {
	var ready atomic.Bool
	c := NewClient(serveUnix(t, NewWorkerHandler(&fakeEngine{}, testInfo, ready.Load)))
	defer c.Close()
	h, err := c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (Health{Status: StatusLoading, PID: os.Getpid()}); h != want {
		t.Errorf("loading health = %+v, want %+v", h, want)
	}
	ready.Store(true)
	h, err = c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Health{Status: StatusReady, NEmbd: 8, MaxTokens: 16, MaxBatchTokens: 32, Model: "tiny", PID: os.Getpid()}
	if h != want {
		t.Errorf("ready health = %+v, want %+v", h, want)
	}
	if h.Info() != testInfo {
		t.Errorf("Info() = %+v, want %+v", h.Info(), testInfo)
	}
}

func TestClientProtocolViolations(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		health  bool
		want    string
	}{
		{"wrong number of embeddings", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"embeddings":[[1,2]]}`))
		}, false, " returned 1 embeddings for 2 sequences"},
		{"ragged embeddings", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"embeddings":[[1,2],[3]]}`))
		}, false, " returned embedding 1 with 1 floats, embedding 0 with 2"},
		{"malformed JSON", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"embeddings":[["a"]]}`))
		}, false, " answered /embed with malformed JSON: json: cannot unmarshal string into Go struct field embedResponse.embeddings of type float32"},
		{"ready without n_embd", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"status":"ready","max_tokens":5,"max_batch_tokens":5,"pid":1}`))
		}, true, " is ready but unusable: engine reports n_embd 0; it must be positive"},
		{"status mismatch", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(503)
			w.Write([]byte(`{"status":"ready","pid":1}`))
		}, true, ` answered /health with 503 and status "ready"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewClient(serveUnix(t, tt.handler))
			defer c.Close()
			var err error
			if tt.health {
				_, err = c.Health(context.Background())
			} else {
				_, err = c.Embed(context.Background(), [][]int32{{1}, {2}})
			}
			if want := "worker at " + c.SocketPath() + tt.want; err == nil || err.Error() != want {
				t.Fatalf("err = %v\nwant  %s", err, want)
			}
			if errors.Is(err, ErrUnavailable) {
				t.Errorf("a protocol violation must not look retryable: %v", err)
			}
		})
	}
}

func TestClientTransportFailures(t *testing.T) {
	t.Run("no socket is unavailable", func(t *testing.T) {
		c := NewClient(filepath.Join(shortTempDir(t), "missing.sock"))
		_, err := c.Embed(context.Background(), [][]int32{{1}})
		var ue *UnavailableError
		if !errors.As(err, &ue) || ue.RetryAfter != 0 || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want UnavailableError without a hint", err)
		}
	})
	t.Run("connection dropped mid-answer is unavailable", func(t *testing.T) {
		c := NewClient(serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.Write([]byte(`{"embeddings":[[1,`))
			panic(http.ErrAbortHandler) // drops the connection, as a dying worker does
		})))
		_, err := c.Embed(context.Background(), [][]int32{{1}})
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
	})
	t.Run("ctx end is the ctx error, not unavailable", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		c := NewClient(serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Embed(ctx, [][]int32{{1}})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want DeadlineExceeded only", err)
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "1": time.Second, " 7 ": 7 * time.Second, "-1": 0, "Wed, 21 Oct 2015 07:28:00 GMT": 0} {
		if got := parseRetryAfter(in); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

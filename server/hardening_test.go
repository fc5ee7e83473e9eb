package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/routing"
)

// TestHealthUnhealthy: GET and HEAD /health answer 503 once Healthy says the process
// cannot recover (the warm worker failed to restart repeatedly).
func TestHealthUnhealthy(t *testing.T) {
	s := &Server{Config: Config{ModelName: "m", Logger: quiet()}, Embedder: &fakeEmbedder{}, Healthy: func() bool { return false }}
	h := s.Handler()
	w := do(h, "GET", "/health", "", nil)
	if want := `{"reason":"the warm worker failed to restart repeatedly; see the log","status":"unhealthy"}`; w.Code != 503 || w.Body.String() != want {
		t.Errorf("GET /health: %d %s, want 503 %s", w.Code, w.Body, want)
	}
	if w := do(h, "HEAD", "/health", "", nil); w.Code != 503 {
		t.Errorf("HEAD /health: %d", w.Code)
	}
	s2 := &Server{Config: Config{ModelName: "m", Logger: quiet()}, Embedder: &fakeEmbedder{}, Healthy: func() bool { return true }, Ready: func() bool { return true }}
	for _, path := range []string{"/health", "/ready"} {
		if w := do(s2.Handler(), "HEAD", path, "", nil); w.Code != 200 {
			t.Errorf("HEAD %s: %d", path, w.Code)
		}
	}
}

// bigEmbedder answers every request with 400 vectors of 4096 floats: about 16 MB
// of JSON, more than loopback socket buffers hold.
type bigEmbedder struct{}

func (bigEmbedder) Embed(context.Context, *routing.Request) (*routing.Result, error) {
	v := make([]float32, 4096)
	for i := range v {
		v[i] = 0.123456789
	}
	res := &routing.Result{Tokens: 1}
	for range 400 {
		res.Vectors = append(res.Vectors, v)
	}
	return res, nil
}

func (bigEmbedder) Prepare(*routing.Request) ([][]int32, error) { return nil, nil }

// TestWriteStallFreesTheSlot: a client that sends a request and never reads the
// answer holds its admission slot only for WriteStallTimeout, not for ever.
func TestWriteStallFreesTheSlot(t *testing.T) {
	s := &Server{Config: Config{ModelName: "m", Logger: quiet(), MaxConcurrentRequests: 1, WriteStallTimeout: 300 * time.Millisecond}, Embedder: bigEmbedder{}}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"input":"never read"}`
	if _, err := c.Write([]byte("POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the stuck request takes the only slot
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _, b := post(srv.URL, "/tokenize", `{"text":"a"}`)
		if code == http.StatusOK {
			break
		}
		if code != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("second request: %d %s", code, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

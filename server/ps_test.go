package server

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestOllamaPS: GET /api/ps lists the loaded models only, in order, with the
// worker's pid, the calls in flight, the idle time (absent while busy) and the
// keep-alive's expiry (without one, 292 years ahead: `ollama ps` shows "Forever"
// past 20 years, "Stopping..." for a zero time), named as /api/tags names them.
func TestOllamaPS(t *testing.T) {
	now := time.Now()
	expires := now.Add(90 * time.Second).UTC().Truncate(time.Millisecond)
	s := &Server{Config: Config{}, Models: []Model{
		{ID: "idle", Embedder: &fakeEmbedder{}},
		{ID: "unloaded", Embedder: &fakeEmbedder{}},
		{ID: "busy", Embedder: &fakeEmbedder{}},
		{ID: "rr", Rerank: true, Reranker: &fakeReranker{}},
	}}
	s.Loads = func(id string) ModelLoad {
		switch id {
		case "idle":
			return ModelLoad{Loaded: true, PID: 11, IdleSince: now.Add(-2500 * time.Millisecond), Expires: expires}
		case "busy":
			return ModelLoad{Loaded: true, PID: 12, InFlight: 3}
		case "rr":
			return ModelLoad{Loaded: true, PID: 13, IdleSince: now.Add(-time.Hour)}
		}
		return ModelLoad{}
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/ps", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /api/ps: %d %s", rec.Code, rec.Body)
	}
	var got PSResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Models) != 3 {
		t.Fatalf("models %+v, want idle, busy and rr", got.Models)
	}
	idle, busy, rr := got.Models[0], got.Models[1], got.Models[2]
	if idle.Name != "idle:latest" || idle.Model != "idle:latest" || idle.Task != "embedding" || idle.PID != 11 || idle.InFlight != 0 ||
		idle.IdleSeconds == nil || *idle.IdleSeconds < 2.5 || *idle.IdleSeconds > 3.5 || !idle.ExpiresAt.Equal(expires) {
		t.Errorf("idle model %+v, want pid 11, idle 2.5 to 3.5 s, expiring at %s", idle, expires)
	}
	forever := now.AddDate(290, 0, 0)
	if busy.Name != "busy:latest" || busy.PID != 12 || busy.InFlight != 3 || busy.IdleSeconds != nil || busy.ExpiresAt.Before(forever) {
		t.Errorf("busy model %+v, want pid 12, 3 in flight, no idle time and no expiry", busy)
	}
	if rr.Name != "rr:latest" || rr.Task != "rerank" || rr.IdleSeconds == nil || *rr.IdleSeconds < 3600 || rr.ExpiresAt.Before(forever) {
		t.Errorf("reranker %+v, want task rerank, idle an hour, no expiry (no keep-alive)", rr)
	}
}

// TestWritePS: `embed-stack ps` names models as --model did (no ":latest"), shows
// the time left before a keep-alive, and "never" for /api/ps's far expiry.
func TestWritePS(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	idle := 2.5
	list := &PSResponse{Models: []PSModel{
		{Name: "e:latest", Task: "embedding", PID: 11, IdleSeconds: &idle, ExpiresAt: now.Add(90 * time.Second)},
		{Name: "rr:v2", Task: "rerank", PID: 12, InFlight: 1, ExpiresAt: now.Add(math.MaxInt64)},
	}}
	var b strings.Builder
	WritePS(&b, list, now)
	want := "NAME   TASK       PID  IN FLIGHT  IDLE  UNTIL\n" +
		"e      embedding  11   0          2.5s  1m30s\n" +
		"rr:v2  rerank     12   1          -     never\n"
	if got := b.String(); got != want {
		t.Errorf("WritePS:\n%s\nwant\n%s", got, want)
	}
}

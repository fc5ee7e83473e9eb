package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdleWatch: one release per idle spell, the first from the start; none while a
// request is in flight or has just ended.
func TestIdleWatch(t *testing.T) {
	var w idleWatch
	for i, tt := range []struct {
		inFlight int
		finished int64
		release  bool
	}{
		{0, 0, true},  // idle since the start: loading's garbage goes back
		{0, 0, false}, // still the same spell
		{1, 0, false}, // a request in flight
		{1, 0, false},
		{0, 1, false}, // it ended during this tick: not idle for a whole tick yet
		{0, 1, true},  // idle for a tick: release
		{0, 1, false},
		{0, 3, false}, // two short requests came and went between ticks
		{2, 3, false},
		{0, 5, false},
		{0, 5, true},
		{0, 5, false},
	} {
		if got := w.tick(tt.inFlight, tt.finished); got != tt.release {
			t.Errorf("tick %d (%d in flight, %d finished): release %v, want %v", i, tt.inFlight, tt.finished, got, tt.release)
		}
	}
}

// TestReleaseWhenIdle: the server counts its work requests, and releases once after
// they end.
func TestReleaseWhenIdle(t *testing.T) {
	s := &Server{Config: Config{ModelName: "m", Logger: quiet()}, Embedder: &fakeEmbedder{}, Ready: func() bool { return true }}
	h := s.Handler()
	if w := do(h, "POST", "/v1/embeddings", `{"model":"m","input":["a"]}`, nil); w.Code != 200 {
		t.Fatalf("embeddings: %d %s", w.Code, w.Body)
	}
	if n := s.limits.finished.Load(); n != 1 {
		t.Fatalf("finished %d after one request, want 1", n)
	}
	do(h, "GET", "/health", "", nil) // not a work request
	if n := s.limits.finished.Load(); n != 1 {
		t.Fatalf("finished %d after /health, want 1", n)
	}
	var released atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.releaseWhenIdle(ctx, time.Millisecond, func() { released.Add(1) })
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for released.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // ticks of the same idle spell
	cancel()
	<-done
	if n := released.Load(); n != 1 {
		t.Errorf("%d releases in one idle spell, want 1", n)
	}
}

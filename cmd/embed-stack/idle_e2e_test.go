package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestServeReleasesIdleHeap: serve hands the free pages of its Go heap back to the
// OS once no request has been in flight for 2 to 4 s (server.Lifecycle.IdleRelease),
// and not while requests keep coming. Its debug line says when: one for the start's
// idle spell, none during 5 s of back-to-back requests, one within 10 s after them.
// /health, polled meanwhile, is not a request that holds the release off.
func TestServeReleasesIdleHeap(t *testing.T) {
	s := e2e.Serve(t, "--log-level", "debug")
	const line = `msg="idle: returned the heap's free pages to the OS"`
	// releases are the times of the release lines in serve's output (which keeps
	// its latest part only, so they are told apart by time, not counted).
	releases := func() []time.Time {
		var ts []time.Time
		for _, l := range strings.Split(s.Out.String(), "\n") {
			if !strings.Contains(l, line) {
				continue
			}
			if v, ok := strings.CutPrefix(l, "time="); ok {
				v, _, _ = strings.Cut(v, " ")
				if at, err := time.Parse(time.RFC3339Nano, v); err == nil {
					ts = append(ts, at)
				}
			}
		}
		return ts
	}
	between := func(from, to time.Time) int {
		n := 0
		for _, at := range releases() {
			if !at.Before(from) && !at.After(to) {
				n++
			}
		}
		return n
	}
	// waitFor polls until a release after from, or the deadline.
	waitFor := func(from, deadline time.Time) bool {
		for between(from, deadline) == 0 && time.Now().Before(deadline) {
			if resp, err := http.Get(s.URL + "/health"); err == nil {
				resp.Body.Close()
			}
			time.Sleep(100 * time.Millisecond)
		}
		return between(from, deadline) > 0
	}
	if !waitFor(time.Time{}, time.Now().Add(10*time.Second)) {
		t.Fatalf("no release in the first 10 s of an idle server; output:\n%s", s.Out)
	}
	inputs := make([]string, 32)
	began, n := time.Now(), 0
	for time.Since(began) < 5*time.Second {
		for i := range inputs {
			inputs[i] = fmt.Sprintf("request %d, text %d: %s", n, i, strings.Repeat("a few words of filler ", 8))
		}
		body, _ := json.Marshal(map[string]any{"model": "tiny", "input": inputs})
		resp, err := http.Post(s.URL+"/v1/embeddings", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", n, resp.StatusCode, b)
		}
		n++
	}
	ended := time.Now()
	if got := between(began, ended); got != 0 {
		t.Errorf("%d releases during 5 s of back-to-back requests (%d of them), want none", got, n)
	}
	if !waitFor(ended, ended.Add(10*time.Second)) {
		t.Errorf("no release within 10 s after the requests ended; output:\n%s", s.Out)
	}
}

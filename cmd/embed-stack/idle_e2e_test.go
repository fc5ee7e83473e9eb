package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends"
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

// TestWorkerReleasesIdleKV: a worker with --release-kv 1s hands its long
// sequences' KV cache pages back to the OS once it has idled that long
// (llama.Config.IdleRelease, kvpages.c), which its debug line reports, and
// answers the same vectors, bit for bit, afterwards: the cells then read as
// zeros. serve passes its --warm-release-kv to the warm worker only.
func TestWorkerReleasesIdleKV(t *testing.T) {
	bin, model := e2e.Paths(t)
	sock := filepath.Join(t.TempDir(), "w.sock")
	p := e2e.Start(t, exec.Command(bin, "worker", "--model", model, "--socket", sock, "--threads", "1", "--ignore-stdin", "--log-level", "debug", "--release-kv", "1s"))
	c := backends.NewClient(sock)
	defer c.Close()
	ctx := context.Background()
	for deadline := time.Now().Add(time.Minute); ; {
		h, err := c.Health(ctx)
		if err == nil && h.Status == backends.StatusReady {
			break
		}
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("the worker is not ready (%v); output:\n%s", err, p.Out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	seqs := [][]int32{{785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 151643}, make([]int32, 600)}
	for i := range seqs[1] {
		seqs[1][i] = int32(1000 + i*7%5000)
	}
	seqs[1][599] = 151643
	want, err := c.Embed(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`msg="llama: idle; returned the KV cache's pages to the OS" bytes=([0-9]+)`)
	released := func() int {
		n := 0
		for _, m := range line.FindAllStringSubmatch(p.Out.String(), -1) {
			if b, _ := strconv.Atoi(m[1]); b > 0 {
				n++
			}
		}
		return n
	}
	before := released()
	for deadline := time.Now().Add(5 * time.Second); released() == before && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if released() == before {
		t.Fatalf("no release line within 5 s of the last request; output:\n%s", p.Out)
	}
	got, err := c.Embed(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("sequence %d (%d tokens): element %d is %v after the release, %v before", i, len(seqs[i]), j, got[i][j], want[i][j])
			}
		}
	}
}

// TestServeWarmReleaseKV: serve's --warm-release-kv reaches the warm worker's
// command line as --release-kv (30s by default), and no ephemeral worker's.
func TestServeWarmReleaseKV(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{{nil, "--release-kv\x0030s\x00"}, {[]string{"--warm-release-kv", "0"}, ""}, {[]string{"--warm-release-kv", "2m"}, "--release-kv\x002m\x00"}} {
		s := e2e.Serve(t, tt.args...)
		pids := procChildren()[s.Process.Cmd.Process.Pid]
		if len(pids) != 1 {
			t.Fatalf("%q: serve's workers %v; want the warm one", tt.args, pids)
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[0]))
		if err != nil {
			t.Fatal(err)
		}
		if got := regexp.MustCompile(`--release-kv\x00[^\x00]*\x00`).FindString(string(cmdline)); got != tt.want {
			t.Errorf("serve %q: the warm worker's --release-kv %q; want %q (command line %q)", tt.args, got, tt.want, cmdline)
		}
	}
}

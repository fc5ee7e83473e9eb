package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/bench"
	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestBenchSmoke is CI's pass of the benchmark harness: `embed-stack bench --quick`
// on the tiny model, against the floor and a serve it starts itself. Benchmarks are
// not timed tests, so nothing here bounds a speed; it checks that every path runs
// and reports what it must: the vector check passed, the over-limit input got 400,
// token counts match, no request failed, the long path left no process behind.
func TestBenchSmoke(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	jsonPath, mdPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "table.md")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "--model", model, "--quick", "--json", jsonPath, "--markdown", mdPath)
	cmd.Dir = e2e.RepoRoot(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}

	if len(rep.Contenders) != 2 || rep.Contenders[0].Role != bench.RoleFloor || rep.Contenders[1].Role != bench.RoleOurs {
		t.Fatalf("contenders %+v, want the floor and embed-stack", rep.Contenders)
	}
	ours := rep.Contenders[1]
	// Same GGUF, same tokens, same llama.cpp: the server's vectors are the floor's.
	if c := ours.Check; c == nil || !c.Pass || c.MinCosine < 0.99999 || c.Tokens != c.WantTokens || len(c.Cosines) != 4 {
		t.Errorf("vector check %+v, want a pass at cosine >= 0.99999 over 4 inputs", c)
	}
	if c := rep.CheckControl; c == nil || !c.Caught {
		t.Errorf("negative control %+v: the check must catch vectors without the end-of-text token on the tiny model", c)
	}
	if ours.ColdStartMS <= 0 || ours.Idle == nil || len(ours.Idle.Procs) != 2 || ours.After == nil || len(ours.After.Procs) != 2 {
		t.Errorf("embed-stack: cold start %v ms, idle %+v, after %+v; want serve and its warm worker, before and after", ours.ColdStartMS, ours.Idle, ours.After)
	}
	if ours.Memory == nil || ours.Memory.Peak.RSS < ours.Idle.RSS {
		t.Errorf("memory: %+v, want a peak at least the idle RSS", ours.Memory)
	}

	// Shapes and their token counts, as --quick sizes them.
	wantShapes := map[string]int{
		bench.ShapeShort: 64, bench.ShapeTwo1k: 512, bench.ShapeLong: 1024, bench.ShapeShortLong: 64 + 1024, bench.ShapeOverLimit: 2049,
		bench.GridShape(1, 16): 16, bench.GridShape(1, 128): 128, bench.GridShape(8, 16): 128, bench.GridShape(8, 128): 1024,
		bench.ClientsShape(1): 0, bench.ClientsShape(4): 0, bench.ShapeInFlight: 0, bench.InFlightShape(400): 0,
	}
	if len(rep.Shapes) != len(wantShapes) {
		t.Errorf("%d shapes, want %d", len(rep.Shapes), len(wantShapes))
	}
	for _, s := range rep.Shapes {
		want, ok := wantShapes[s.ID]
		if !ok || s.Tokens != want {
			t.Errorf("shape %s of %d tokens per request; want %d (known: %v)", s.ID, s.Tokens, want, ok)
		}
	}
	for _, r := range rep.Results {
		switch {
		case r.Skipped != "":
			if r.Contender != "floor" || (r.Shape != bench.ShapeOverLimit && r.Shape != bench.ShapeInFlight && r.Shape != bench.InFlightShape(400)) {
				t.Errorf("%s on %s skipped: %s", r.Shape, r.Contender, r.Skipped)
			}
			continue
		case r.Errors != 0 || r.TokenMismatches != 0 || r.WarmupErrors != 0 || r.Requests == 0:
			t.Errorf("%s on %s: %d requests, %d errors (%s), %d token mismatches (%s)", r.Shape, r.Contender, r.Requests, r.Errors, r.FirstError, r.TokenMismatches, r.FirstMismatch)
		}
		if r.Shape == bench.ShapeOverLimit {
			if r.Statuses["400"] != r.Requests || r.Requests != 1 {
				t.Errorf("over the limit: statuses %v over %d requests, want one 400", r.Statuses, r.Requests)
			}
			continue
		}
		if r.Statuses["200"] != r.Requests || r.TokensPerSec.N == 0 && r.Shape != bench.ShapeInFlight && r.Shape != bench.InFlightShape(400) {
			t.Errorf("%s on %s: statuses %v over %d requests, tokens/s %+v", r.Shape, r.Contender, r.Statuses, r.Requests, r.TokensPerSec)
		}
	}
	for _, id := range []string{bench.ShapeInFlight, bench.InFlightShape(400)} {
		if r := rep.Result(id, "embed-stack"); r == nil || r.IdleMS == nil || r.IdleMS.N != 3 || r.InFlightMS == nil || r.InFlightMS.N == 0 {
			t.Errorf("%s: %+v, want 3 idle queries and at least one beside the long input", id, r)
		}
	}
	names := map[string]bool{}
	for _, g := range rep.Goals {
		names[g.Name] = true
	}
	for _, n := range []string{"single short query, end to end", "short query while a long input is in flight (in-flight)", "short query while a long input is in flight (in-flight/400)", "idle memory: serve alone", "no long-path process when idle", "spawn-to-result for a long input"} {
		if !names[n] {
			t.Errorf("no goal %q in %+v", n, rep.Goals)
		}
	}
	for _, g := range rep.Goals {
		if g.Name == "no long-path process when idle" && (g.Met == nil || !*g.Met) {
			t.Errorf("goal %q: %s", g.Name, g.Measured)
		}
	}

	// The table on stdout is the one written to --markdown.
	md, err := os.ReadFile(mdPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, stdout.Bytes()) || !strings.Contains(stdout.String(), "| seed/over-limit | embed-stack | 1 | 0 |") {
		t.Errorf("table:\n%s", stdout.String())
	}
}

// TestBenchFlags covers the command line's refusals: each names what to change.
func TestBenchFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "--model is required"},
		{[]string{"--model", "m.gguf", "--batches", "1,x"}, "--batches \"1,x\": give positive integers"},
		{[]string{"--model", "m.gguf", "--pid", "12"}, "--pid goes with --url"},
		{[]string{"--model", "m.gguf", "--corpus", "c.txt", "--peer", "nourl"}, "use name=URL"},
		{[]string{"--model", "m.gguf", "--corpus", "c.txt", "--peer", "x=http://h/v1,pid=abc"}, "is not a process id"},
		{[]string{"--model", "m.gguf", "--corpus", "c.txt", "--peer", "x=http://h/v1,colour=red"}, "unknown option \"colour\""},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"bench"}, tt.args...), &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want it to contain %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

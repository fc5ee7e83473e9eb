package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	_, model := e2e.Paths(t)
	mdPath := filepath.Join(t.TempDir(), "table.md")
	rep, stdout := runBench(t, "--model", model, "--quick", "--markdown", mdPath)

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
	// --weights auto, the default: the floor and the served model on serve's
	// default weights, converted to BF16 where `devices` says auto converts.
	bin, _ := e2e.Paths(t)
	_, devices, _ := runBin(t, bin, "devices")
	weights, from := "F16", ""
	if strings.Contains(devices, "weights: --weights auto converts F16 matrices to BF16") {
		weights, from = "BF16", "F16"
	}
	if rep.Host.Weights != weights || rep.Host.WeightsConvertedFrom != from || !strings.Contains(ours.About, "--weights=auto") {
		t.Errorf("floor weights %q converted from %q, embed-stack started as %q; want %s from %q and --weights=auto", rep.Host.Weights, rep.Host.WeightsConvertedFrom, ours.About, weights, from)
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

// TestBenchWeightsBF16: bench --weights bf16 runs the floor on the tiny model's
// F16 matrices converted to BF16 at load into --weights-cache (package weights, as
// serve's workers get them), says so on the report's host line, and starts the
// served embed-stack with the same --weights and --weights-cache, so that one
// converted file serves both and the served vectors pass the vector check against
// that floor.
func TestBenchWeightsBF16(t *testing.T) {
	_, model := e2e.Paths(t)
	cache := t.TempDir()
	rep, stdout := runBench(t, "--model", model, "--quick", "--only", bench.ShapeShort, "--weights", "bf16", "--weights-cache", cache)
	files := convertedFiles(t, cache)
	if len(files) != 1 {
		t.Fatalf("weights cache %s holds %v, want the one converted file", cache, files)
	}
	const want = "BF16 (converted from F16)"
	if rep.Host.Weights != "BF16" || rep.Host.WeightsConvertedFrom != "F16" || !strings.Contains(stdout.String(), ", weights "+want+"), load average ") {
		t.Errorf("floor weights %q converted from %q, want BF16 from F16, and %q on the host line:\n%s", rep.Host.Weights, rep.Host.WeightsConvertedFrom, want, stdout.String())
	}
	if len(rep.Contenders) != 2 || rep.Contenders[0].Role != bench.RoleFloor || rep.Contenders[1].Name != "embed-stack" {
		t.Fatalf("contenders %+v, want the floor and embed-stack", rep.Contenders)
	}
	floor, ours := rep.Contenders[0], rep.Contenders[1]
	if !strings.Contains(floor.About, "weights "+want+",") || !strings.Contains(floor.About, files[0]) {
		t.Errorf("floor: %q, want it to name its BF16 weights and %s", floor.About, files[0])
	}
	if !strings.Contains(ours.About, "--weights=bf16") || !strings.Contains(ours.About, "--weights-cache="+cache) {
		t.Errorf("embed-stack started as %q, without the floor's --weights=bf16 --weights-cache=%s", ours.About, cache)
	}
	// Same converted file, same tokens, same llama.cpp: the floor's vectors.
	if c := ours.Check; c == nil || !c.Pass || c.MinCosine < 0.99999 || c.Tokens != c.WantTokens || len(c.Cosines) != 4 {
		t.Errorf("vector check %+v, want a pass at cosine >= 0.99999 over 4 inputs", c)
	}
	if r := rep.Result(bench.ShapeShort, "embed-stack"); r == nil || r.Requests == 0 || r.Statuses["200"] != r.Requests {
		t.Errorf("%s on embed-stack: %+v", bench.ShapeShort, r)
	}
}

// runBench runs `embed-stack bench args --json FILE` from the repository root and
// returns the report it wrote and its stdout (the table).
func runBench(t *testing.T, args ...string) (bench.Report, *bytes.Buffer) {
	t.Helper()
	bin, _ := e2e.Paths(t)
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"bench"}, args...), "--json", jsonPath)...)
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
	return rep, &stdout
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
		{[]string{"--model", "m.gguf", "--weights", "fp8"}, `--weights: unknown weights mode "fp8": choose auto, file, bf16`},
		{[]string{"--model", "m.gguf", "--corpus", "c.txt", "--reindex-cache-size", "0"}, "--reindex-cache-size 0: give the cache of the re-index shape's second server in MiB, at least 1"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"bench"}, tt.args...), &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want it to contain %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// TestBenchReindex runs the re-index shape through the binary on the tiny model:
// the harness starts a second serve with --cache-size, primes it and the plain one
// with the seen documents, times the whole corpus on both and compares the vectors.
// The cache answered exactly the seen documents' tokens (none while priming), every
// vector is bit-identical to the plain server's, and the ratio is the two servers'
// tokens/s. Whether it reaches 4× is the benchmark's to say, not a test's.
func TestBenchReindex(t *testing.T) {
	bin, model := e2e.Paths(t)
	rep, stdout := runBench(t, "--model", model, "--quick", "--only", "reindex", "--reindex-docs", "20",
		"--reindex-tokens", "16", "--reindex-batch", "5", "--reindex-cache-size", "8")
	if len(rep.Contenders) != 3 || rep.Contenders[1].Name != "embed-stack" || rep.Contenders[1].CacheMiB != 0 ||
		rep.Contenders[2].Name != bench.CachedName || rep.Contenders[2].CacheMiB != 8 || !strings.Contains(rep.Contenders[2].About, "--cache-size 8") {
		t.Fatalf("contenders %+v, want the floor, embed-stack and embed-stack+cache with --cache-size 8", rep.Contenders)
	}
	if c := rep.Contenders[2].Check; c == nil || !c.Pass {
		t.Errorf("the cached server's vector check: %+v", c)
	}
	if len(rep.Shapes) != 1 || rep.Shapes[0].ID != bench.ShapeReindex || rep.Shapes[0].Tokens != 5*16 {
		t.Fatalf("shapes %+v, want reindex alone, 80 tokens per request", rep.Shapes)
	}
	if f := rep.Result(bench.ShapeReindex, "floor"); f == nil || f.Skipped != "not applicable to the in-process engine" {
		t.Errorf("floor: %+v", f)
	}
	plain, cached := rep.Result(bench.ShapeReindex, "embed-stack"), rep.Result(bench.ShapeReindex, bench.CachedName)
	for _, r := range []*bench.Result{plain, cached} {
		if r == nil || r.Reindex == nil || r.Requests != 4 || r.Statuses["200"] != 4 || r.Errors != 0 || r.WarmupErrors != 0 || r.TokenMismatches != 0 || r.TokensPerSec.N != 1 {
			t.Fatalf("result %+v, want 4 timed requests answered 200 with the token counts sent", r)
		}
		if a := r.Reindex; a.Docs != 20 || a.Seen != 16 || a.Tokens != 320 || a.PrimeCachedTokens != 0 || a.Seconds <= 0 || a.PrimeSeconds <= 0 {
			t.Errorf("%s: %+v, want 20 documents of 16 tokens, 16 primed, nothing cached while priming", r.Contender, a)
		}
	}
	if a := plain.Reindex; a.CachedTokens != 0 || a.Reference != "" {
		t.Errorf("embed-stack without a cache: %d cached tokens, reference %q", a.CachedTokens, a.Reference)
	}
	a := cached.Reindex
	if a.CachedTokens != 16*16 {
		t.Errorf("the cache answered %d tokens in the timed pass, want the 16 seen documents' 256", a.CachedTokens)
	}
	if a.Reference != "embed-stack" || a.Compared != 20 || a.BitIdentical != 20 || a.FirstDiffer != "" || a.MinCosine < 0.9999999 {
		t.Errorf("comparison: %+v, want all 20 vectors bit-identical to embed-stack's", a)
	}
	if a.Speedup != cached.TokensPerSec.Median/plain.TokensPerSec.Median || cached.TokensPerSec.Median != 320/a.Seconds {
		t.Errorf("speedup %v, tokens/s %v against %v over %v s", a.Speedup, cached.TokensPerSec.Median, plain.TokensPerSec.Median, a.Seconds)
	}
	var goal *bench.Goal
	for i, g := range rep.Goals {
		if g.Name == "re-index with the cache (reindex)" {
			goal = &rep.Goals[i]
		}
	}
	if goal == nil || goal.Met == nil || !strings.HasSuffix(goal.Measured, "20 of 20 vectors bit-identical, 256 of 320 tokens answered from the cache") {
		t.Errorf("goal %+v", goal)
	}
	if !strings.Contains(stdout.String(), "\nRe-index (re-index of 20 documents of 16 tokens in requests of 5, 16 of them (80%) embedded before in an untimed priming pass;") ||
		!strings.Contains(stdout.String(), "| embed-stack+cache | 8 MiB | ") || !strings.Contains(stdout.String(), " embed-stack | 20 of 20 | ") {
		t.Errorf("table:\n%s", stdout.String())
	}

	// A share out of range is refused before any server starts.
	out, err := exec.Command(bin, "bench", "--model", model, "--only", "reindex", "--reindex-seen", "120").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "embed-stack bench: shape reindex: re-index of 1000 documents of 64 tokens, 120% seen, in requests of 100: give") {
		t.Errorf("--reindex-seen 120: %v\n%s", err, out)
	}
}

// TestBenchPromptedModel runs the harness on a model whose family prompts a
// document (nomic-bert: "search_document: ", and "search_query: " for a query):
// the corpus wraps each text in them once, and the serve the harness starts must
// embed the text as sent (--prompts=none), not wrap it again. Wrapped twice, its
// token counts exceeded the floor's and the vector check refused it.
func TestBenchPromptedModel(t *testing.T) {
	model := encoderModel(t, "models/nomic-bert-tiny.gguf")
	// --quick's serve flags allow 2048 tokens; this model takes 512.
	rep, _ := runBench(t, "--model", model, "--quick", "--only", bench.ShapeShort, "--serve-arg=--max-input-tokens=512")
	if len(rep.Contenders) != 2 || rep.Contenders[1].Name != "embed-stack" {
		t.Fatalf("contenders %+v, want the floor and embed-stack", rep.Contenders)
	}
	if !strings.Contains(rep.Contenders[1].About, "--prompts=none") {
		t.Errorf("embed-stack started as %q, without --prompts=none", rep.Contenders[1].About)
	}
	if c := rep.Contenders[1].Check; c == nil || !c.Pass || c.Tokens != c.WantTokens || c.MinCosine < 0.99999 {
		t.Fatalf("vector check %+v, want a pass on the tokens sent, at cosine >= 0.99999", c)
	}
	r := rep.Result(bench.ShapeShort, "embed-stack")
	if r == nil || r.Requests == 0 || r.Statuses["200"] != r.Requests || r.TokenMismatches != 0 {
		t.Errorf("%s on embed-stack: %+v, want every request answered 200 with the tokens sent", bench.ShapeShort, r)
	}
}

package conformance

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/testenv"
)

// fuzzBudget bounds the schemathesis run (its --max-time); the test's own deadline
// adds room for start-up and the last requests.
const fuzzBudget = 75 * time.Second

// A property-based fuzzer (schemathesis, pinned in conformance/python/requirements.txt)
// generates requests from GET /openapi.json, valid and invalid, and sends them to the
// real binary: every answer must be documented for its status, match its schema,
// content type and headers, and none may be a 5xx.
//
// It runs when EMBED_STACK_SCHEMATHESIS names the schemathesis executable; `make
// test-openapi` (part of `make test`) installs it into a virtual environment and sets
// it.
//
// It runs twice: against a server of the default model, and against one serving a
// reranker and an embedding model (issue 28), the reranker first, with the document
// of the whole server (bounds the widest of the models) and then the embedding
// model's own (GET /openapi.json?model=e).
func TestOpenAPIFuzz(t *testing.T) {
	st := testenv.Get("EMBED_STACK_SCHEMATHESIS")
	if st == "" {
		t.Skip("EMBED_STACK_SCHEMATHESIS is not set: `make test-openapi` runs this test")
	}
	t.Run("one model", func(t *testing.T) {
		// Its own server: the fuzzer's requests must not slow the other tests' shared one.
		fuzzOpenAPI(t, st, serverWith(t, "--threads", "1"), "/openapi.json", fuzzBudget, minFuzzCases)
	})
	t.Run("several models", func(t *testing.T) {
		// --max-inputs 256: the coverage phase sends requests at the documented bound,
		// and 2048 documents take 10 s each at one thread (see severalBudget).
		s := serverWith(t, "--threads", "1", "--max-inputs", "256", "--model", "r="+rerankerPath(), "--model", "e="+modelPath)
		fuzzOpenAPI(t, st, s, "/openapi.json", severalBudget, minSeveralCases)
		fuzzOpenAPI(t, st, s, "/openapi.json?model=e", severalBudget, minSeveralCases)
	})
}

// severalBudget is each of the several-models server's two runs, and
// minSeveralCases the least requests each must send. The coverage phase alone takes
// 31 s on a quiet 2-core machine for the whole server's document: its boundary cases
// include rerank requests at the reranker's largest document count (2048 documents,
// 10 s each at one thread), so a 30 s budget ended before the last operation; the
// server now caps inputs at 256 and the budget is doubled.
const (
	severalBudget   = 60 * time.Second
	minSeveralCases = 50
)

// fuzzOpenAPI runs schemathesis on the document at path of s for budget, requiring
// every operation tested with at least least requests.
func fuzzOpenAPI(t *testing.T, st string, s *server, path string, budget time.Duration, least int) {
	t.Helper()
	args := []string{"run", s.URL + path,
		"--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance",
		"--phases", "examples,coverage,fuzzing",
		"--max-time", strconv.Itoa(int(budget.Seconds())),
		"--max-examples", "200",
		"--seed", "17",
		"--workers", "2",
		"--request-timeout", "30",
		"--generation-database", "none",
		"--suppress-health-check", "all",
		"--no-color",
	}
	dir := t.TempDir() // schemathesis may write reports and caches here
	run := func() ([]byte, error) {
		// Each attempt has its own deadline: a crashed run may have used its whole
		// budget, and the rerun needs as much.
		ctx, cancel := context.WithTimeout(context.Background(), budget+60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, st, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir)
		cmd.WaitDelay = 5 * time.Second
		return cmd.CombinedOutput()
	}
	out, err := run()
	for attempt := 2; attempt <= 3 && err != nil && bytes.Contains(out, []byte(cpythonASTBug)) && !bytes.Contains(out, []byte("Failures:")); attempt++ {
		// The fuzzer itself crashed, in Python, before any check failed: run it again.
		t.Logf("schemathesis crashed in CPython (%q), not on an answer of ours; attempt %d:\n%s", cpythonASTBug, attempt, lastBytes(out, 1500))
		out, err = run()
	}
	if err != nil {
		t.Fatalf("schemathesis: %v\n%s\nserver log:\n%s", err, lastBytes(out, 12000), s.Out)
	}
	t.Logf("schemathesis %s:\n%s", path, lastBytes(out, 3000))
	// schemathesis exits 0 when its time ran out before it tested anything: require
	// that every operation was tested, with enough cases to mean something.
	selected := regexp.MustCompile(`Selected: (\d+)/(\d+)`).FindSubmatch(out)
	tested := regexp.MustCompile(`Tested: (\d+)`).FindSubmatch(out)
	generated := regexp.MustCompile(`(\d+) generated`).FindSubmatch(out)
	if selected == nil || tested == nil || generated == nil {
		t.Fatalf("no summary in the schemathesis output")
	}
	ops, _ := strconv.Atoi(string(selected[2]))
	n, _ := strconv.Atoi(string(generated[1]))
	if string(selected[1]) != string(selected[2]) || string(tested[1]) != string(selected[2]) || ops < 11 || n < least {
		t.Fatalf("schemathesis tested %s of %s operations (%s selected) with %d cases; want all, at least 11, and %d cases", tested[1], selected[2], selected[1], n, least)
	}
}

// cpythonASTBug is the signature of a crash inside schemathesis (hypothesis describing a
// strategy with ast.parse near the recursion limit) on CPython 3.11 before 3.11.8, which
// Debian 12 ships: the run reports it as a "Runtime Error", with no check failed. Seen
// once in four runs of the same seed; the test reruns schemathesis once on it.
const cpythonASTBug = "SystemError: AST constructor recursion depth mismatch"

// minFuzzCases is the least number of generated requests the one-model run must
// send: 711 in 75 s on a loaded 2-core machine.
const minFuzzCases = 200

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		return "..." + string(b[len(b)-n:])
	}
	return string(b)
}

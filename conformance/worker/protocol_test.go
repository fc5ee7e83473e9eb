package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestHealth: while loading (if the suite saw it) /health is exactly
// 503 {"status":"loading","pid":P} with Retry-After: 1 and /embed is 503; then 200 with
// exactly the six fields, the pid being the process started and the sizes usable.
func TestHealth(t *testing.T) {
	w := sharedWorker(t, "A")
	t.Logf("worker A: %q", w.argv)
	seen := 0
	for _, a := range w.loading {
		if a.problem != "" {
			t.Errorf("%s while loading: %s (got %d %s)", a.what, a.problem, a.status, a.body)
		}
		if a.what == "GET /health" {
			seen++
		}
	}
	t.Logf("saw %d loading answers before ready (a fast load may show none)", seen)
	requireReadyHealth(t, w, w.readyRaw)

	// Ready stays ready, and says the same.
	r := w.call(t, http.MethodGet, "/health", nil, nil)
	if r.status != http.StatusOK || withoutFreeMemory(r.body) != withoutFreeMemory(w.readyRaw) {
		t.Errorf("second GET /health: %d %s, want 200 %s", r.status, r.body, w.readyRaw)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("GET /health Content-Type %q, want application/json", ct)
	}
}

// withoutFreeMemory is a /health body in canonical form without the device's free
// memory, the one figure that moves between two answers.
func withoutFreeMemory(b []byte) string {
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	if d, ok := v["device"].(map[string]any); ok {
		delete(d, "memory_free_bytes")
	}
	out, _ := json.Marshal(v)
	return canonicalJSON(out)
}

// requireReadyHealth checks a ready /health body of w.
func requireReadyHealth(t *testing.T, w *worker, raw []byte) {
	t.Helper()
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatalf("worker %s: /health body %s: %v", w.name, raw, err)
	}
	got := make([]string, 0, len(keys))
	for k := range keys {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{"max_batch_tokens", "max_tokens", "model", "n_embd", "pid", "status"}
	// short_jobs is optional: the Go worker reports which requests it runs ahead of
	// a long input (backends.ShortJobs); a worker without it gets requests in turn.
	if _, ok := keys["short_jobs"]; ok {
		want = append(want, "short_jobs")
		var sj struct {
			MaxTokens   int `json:"max_tokens"`
			BatchTokens int `json:"batch_tokens"`
			MaxSeqs     int `json:"max_seqs"`
		}
		if err := json.Unmarshal(keys["short_jobs"], &sj); err != nil || sj.MaxTokens <= 0 || sj.BatchTokens < sj.MaxTokens || sj.MaxSeqs <= 0 || sj.BatchTokens > w.ready.MaxBatchTokens {
			t.Errorf("worker %s: /health short_jobs %s, want positive limits within max_batch_tokens %d (%v)", w.name, keys["short_jobs"], w.ready.MaxBatchTokens, err)
		}
	}
	if _, ok := keys["device"]; ok {
		want = append(want, "device")
		var d struct {
			Name        string `json:"name"`
			Backend     string `json:"backend"`
			MemoryTotal int64  `json:"memory_total_bytes"`
			MemoryFree  int64  `json:"memory_free_bytes"`
		}
		if err := json.Unmarshal(keys["device"], &d); err != nil || d.Name == "" || d.Backend == "" || d.MemoryTotal <= 0 || d.MemoryFree < 0 || d.MemoryFree > d.MemoryTotal {
			t.Errorf("worker %s: /health device %s, want a name, a backend and its memory (%v)", w.name, keys["device"], err)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("worker %s: /health keys %v, want exactly %v (device and short_jobs optional)", w.name, got, want)
	}
	h := w.ready
	if h.Status != "ready" {
		t.Errorf("worker %s: status %q, want ready", w.name, h.Status)
	}
	if h.PID != w.cmd.Process.Pid {
		t.Errorf("worker %s: pid %d, want %d (the process started)", w.name, h.PID, w.cmd.Process.Pid)
	}
	if h.NEmbd <= 0 || h.MaxTokens <= 0 || h.MaxBatchTokens <= 0 {
		t.Errorf("worker %s: n_embd %d, max_tokens %d, max_batch_tokens %d; all must be positive", w.name, h.NEmbd, h.MaxTokens, h.MaxBatchTokens)
	}
	if h.Model == "" {
		t.Errorf("worker %s: model is empty", w.name)
	}
	if w.name == "A" && suite.modelName != "" && h.Model != suite.modelName {
		t.Errorf("worker %s: model %q, want %q", w.name, h.Model, suite.modelName)
	}
	if w.name == "A" && suite.refPath != "" {
		if want := referenceDim(t); h.NEmbd != want {
			t.Errorf("worker %s: n_embd %d, want %d (the reference model's)", w.name, h.NEmbd, want)
		}
	}
}

// referenceDim loads the reference and returns its hidden size.
func referenceDim(t *testing.T) int {
	t.Helper()
	referenceVector(t, 1)
	return ref.model.Dim()
}

// TestEmbedBatch: one vector per sequence, in input order; each sequence inside a batch
// of mixed lengths (given out of order) agrees with its answer alone.
func TestEmbedBatch(t *testing.T) {
	w := sharedWorker(t, "A")
	ls := capped(batchLengths, w.ready.MaxTokens)
	alone := make([][]float32, len(ls))
	for i, n := range ls {
		alone[i] = w.embed(t, [][]int32{seqOf(n)}, nil)[0]
	}
	batch := make([][]int32, len(ls))
	for i, n := range ls {
		batch[i] = seqOf(n)
	}
	got := w.embed(t, batch, nil)
	for i, n := range ls {
		// Nearest answer alone: a swap of two vectors fails here even if some pair of
		// sequences happened to give similar vectors.
		best, bestCos := -1, -2.0
		for j := range alone {
			if c := cos32(got[i], alone[j]); c > bestCos {
				best, bestCos = j, c
			}
		}
		if best != i {
			t.Errorf("batch position %d (%d tokens) is nearest to the answer for %d tokens: input order lost", i, n, ls[best])
		}
		if c := cos32(got[i], alone[i]); !(c >= sameComputation) {
			t.Errorf("%d tokens: cosine(in a batch of %v, alone) = %.8f, want ≥ %g", n, ls, c, sameComputation)
		}
	}
}

// TestEmbedDeterministic: the same request twice gives the same bits.
func TestEmbedDeterministic(t *testing.T) {
	w := sharedWorker(t, "A")
	var batch [][]int32
	for _, n := range capped(batchLengths, w.ready.MaxTokens) {
		batch = append(batch, seqOf(n))
	}
	first := w.embed(t, batch, nil)
	second := w.embed(t, batch, nil)
	for i := range first {
		if j := firstBitDifference(first[i], second[i]); j >= 0 {
			t.Errorf("sequence %d (%d tokens): second answer differs at %d: %v vs %v", i, len(batch[i]), j, first[i][j], second[i][j])
		}
	}
}

// TestEmbedReference: every vector agrees with the float64 reference forward pass over
// the same GGUF.
func TestEmbedReference(t *testing.T) {
	w := sharedWorker(t, "A")
	if suite.refPath == "" {
		t.Skip("no REFERENCE_GGUF")
	}
	worst := 1.0
	for _, n := range capped(baseLengths, min(refMaxLen, w.ready.MaxTokens)) {
		want := referenceVector(t, n)
		got := w.embed(t, [][]int32{seqOf(n)}, nil)[0]
		c := cosine(f64(got), want)
		worst = min(worst, c)
		if !(c >= suite.cosineMin) {
			t.Errorf("%d tokens: cosine with the reference %.7f, want ≥ %g (WORKER_COSINE_MIN)", n, c, suite.cosineMin)
		}
	}
	t.Logf("worst cosine with the reference: %.7f (bound %g)", worst, suite.cosineMin)
}

// TestEmbedMaxTokens: a sequence of exactly max_tokens is accepted (max_tokens+1 is
// refused; see TestRefusals).
func TestEmbedMaxTokens(t *testing.T) {
	w := sharedWorker(t, "A")
	n := w.ready.MaxTokens
	got := w.embed(t, [][]int32{seqOf(n)}, nil)
	if len(got) != 1 {
		t.Fatalf("%d vectors, want 1", len(got))
	}
}

// TestRefusals: the protocol's 400s with their exact bodies (the wording of the Go
// handler, backends/handler.go, which the MLX worker copies), 404 and 405; the worker
// still serves afterwards.
func TestRefusals(t *testing.T) {
	w := sharedWorker(t, "A")
	maxT := w.ready.MaxTokens
	tooLong := make([]int32, maxT+1)
	for i := range tooLong {
		tooLong[i] = 1
	}
	tooLongBody, err := json.Marshal(map[string]any{"tokens": [][]int32{tooLong}})
	if err != nil {
		t.Fatal(err)
	}
	v := suite.vocab
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   string
		status int
		want   string // the exact body, canonical JSON; "" when wantPrefix is used
		// wantPrefix: the body is {"error": message} and message starts with it (the
		// rest is the JSON decoder's own wording, which differs between languages).
		wantPrefix string
		allow      string
	}{
		{name: "empty list", body: `{"tokens":[]}`, status: 400,
			want: `{"error":"\"tokens\" is empty; send at least one sequence"}`},
		{name: "missing tokens", body: `{}`, status: 400,
			want: `{"error":"\"tokens\" is missing; send {\"tokens\":[[id,...],...]}"}`},
		{name: "empty sequence", body: `{"tokens":[[1],[]]}`, status: 400,
			want: `{"error":"the sequence is empty","index":1}`},
		{name: "too long", body: string(tooLongBody), status: 400,
			want: fmt.Sprintf(`{"error":"the sequence has %d tokens; this worker accepts at most %d (max_tokens)","index":0}`, maxT+1, maxT)},
		{name: "negative id", body: `{"tokens":[[1],[5,-2]]}`, status: 400,
			want: `{"error":"token 1 is id -2; ids are not negative","index":1}`},
		{name: "id out of vocabulary", body: fmt.Sprintf(`{"tokens":[[1],[2,%d]]}`, v), status: 400,
			want: fmt.Sprintf(`{"error":"token 1 is id %d, outside the vocabulary [0, %d)","index":1}`, v, v)},
		{name: "bad JSON", body: `{not json`, status: 400,
			wantPrefix: `the body is not a JSON object {"tokens":[[id,...],...]}: `},
		{name: "unknown path", method: http.MethodGet, path: "/nope", status: 404,
			want: `{"error":"no such endpoint /nope; the worker serves GET /health and POST /embed"}`},
		{name: "GET /embed", method: http.MethodGet, path: "/embed", status: 405, allow: "POST",
			want: `{"error":"GET /embed is not allowed; use POST"}`},
		{name: "POST /health", method: http.MethodPost, path: "/health", body: `{}`, status: 405, allow: "GET, HEAD",
			want: `{"error":"POST /health is not allowed; use GET"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, path := tc.method, tc.path
			if method == "" {
				method, path = http.MethodPost, "/embed"
			}
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := w.call(t, method, path, body, nil)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tc.status, abbreviate(r.body))
			}
			if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if tc.allow != "" && r.header.Get("Allow") != tc.allow {
				t.Errorf("Allow %q, want %q", r.header.Get("Allow"), tc.allow)
			}
			if tc.want != "" {
				if got, want := canonicalJSON(r.body), canonicalJSON([]byte(tc.want)); got != want {
					t.Errorf("body %s\nwant %s", got, want)
				}
				return
			}
			var e map[string]any
			if err := json.Unmarshal(r.body, &e); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			msg, _ := e["error"].(string)
			if len(e) != 1 || !strings.HasPrefix(msg, tc.wantPrefix) || len(msg) == len(tc.wantPrefix) {
				t.Errorf(`body %s, want exactly {"error":"%s<the decoder's reason>"}`, r.body, tc.wantPrefix)
			}
		})
	}
	// Nothing above reached the model with a bad id (llama.cpp aborts the process on
	// one), and the worker still answers.
	w.embed(t, [][]int32{seqOf(2)}, nil)
}

// TestTraceparent: a W3C traceparent header is accepted (and a malformed one ignored)
// without changing the answer.
func TestTraceparent(t *testing.T) {
	w := sharedWorker(t, "A")
	seqs := [][]int32{seqOf(17)}
	plain := w.embed(t, seqs, nil)[0]
	for _, tp := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"not a traceparent",
	} {
		got := w.embed(t, seqs, map[string]string{"traceparent": tp})[0]
		if j := firstBitDifference(got, plain); j >= 0 {
			t.Errorf("traceparent %q: answer differs at %d: %v vs %v", tp, j, got[j], plain[j])
		}
	}
}

// TestConcurrentRequests: requests in flight together each get their own answer.
func TestConcurrentRequests(t *testing.T) {
	w := sharedWorker(t, "A")
	ls := capped(batchLengths, w.ready.MaxTokens)
	alone := make([][]float32, len(ls))
	for i, n := range ls {
		alone[i] = w.embed(t, [][]int32{seqOf(n)}, nil)[0]
	}
	got := make([][]float32, len(ls))
	errs := make([]error, len(ls))
	ctx := ctxFor(t)
	var wg sync.WaitGroup
	for i, n := range ls {
		wg.Go(func() {
			var v [][]float32
			if v, errs[i] = w.tryEmbed(ctx, [][]int32{seqOf(n)}, nil); errs[i] == nil {
				got[i] = v[0]
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, n := range ls {
		if c := cos32(got[i], alone[i]); !(c >= sameComputation) {
			t.Errorf("%d tokens: cosine(concurrent, alone) = %.8f, want ≥ %g", n, c, sameComputation)
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/telemetry/telemetrytest"
)

// serveWith starts `embed-stack serve` with exactly args (and --addr, --threads 1
// and --debug-vars) and waits until it is ready; e2e.Serve would add a --model.
func serveWith(t *testing.T, args ...string) *e2e.Server {
	t.Helper()
	bin, _ := e2e.Paths(t)
	addr := e2e.FreeAddr(t)
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr, "--threads", "1", "--debug-vars"}, args...)...)
	cmd.Dir = e2e.RepoRoot(t)
	s := &e2e.Server{Process: e2e.Start(t, cmd), URL: "http://" + addr}
	s.WaitReady(t, s.URL, e2e.ReadyTimeout)
	return s
}

// call sends body (GET when empty) and returns the status and body.
func call(t *testing.T, url, body string) (int, string) {
	t.Helper()
	return callWithKey(t, url, "", body)
}

// callWithKey is call with the API key key ("" for none).
func callWithKey(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	method := http.MethodGet
	if body != "" {
		method = http.MethodPost
	}
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rerankScores posts a rerank request and returns the scores by document index.
func rerankScores(t *testing.T, url, body string) []float64 {
	t.Helper()
	code, raw := call(t, url+"/v1/rerank", body)
	if code != 200 {
		t.Fatalf("POST /v1/rerank %s: %d %s", body, code, raw)
	}
	var out struct {
		Results []struct {
			Index int     `json:"index"`
			Score float64 `json:"relevance_score"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatal(err)
	}
	scores := make([]float64, len(out.Results))
	for _, r := range out.Results {
		scores[r.Index] = r.Score
	}
	return scores
}

// modelVars is one model's figures in GET /debug/vars.
type modelVars struct {
	PID, ColdStarts int
	LastMS          int64
}

func varsOf(t *testing.T, url, model string) modelVars {
	t.Helper()
	code, raw := call(t, url+"/debug/vars", "")
	var v map[string]float64 // every value a number, as the other clients read them
	if code != 200 || json.Unmarshal([]byte(raw), &v) != nil {
		t.Fatalf("GET /debug/vars: %d %s", code, raw)
	}
	pid, ok := v["model/"+model+"/warm_worker_pid"]
	if !ok {
		t.Fatalf("GET /debug/vars has no model %q: %s", model, raw)
	}
	return modelVars{PID: int(pid), ColdStarts: int(v["model/"+model+"/cold_starts"]), LastMS: int64(v["model/"+model+"/last_cold_start_ms"])}
}

// requireLines fails unless every line of want is in GET /metrics, and reports a
// model label that is not a served model's id (an alias, a name no model has, or
// an empty one).
func requireLines(t *testing.T, url string, want ...string) {
	t.Helper()
	code, raw := call(t, url+"/metrics", "")
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, raw)
	}
	got := telemetrytest.ParseSamples(raw)
	got.Require(t, want...)
	for _, bad := range []string{`model="text-embedding-3-small"`, `model="nope"`, `model=""`} {
		for _, l := range got.Matching(bad) {
			t.Errorf("GET /metrics: %s: a model label from the request, or an empty one", l)
		}
	}
	if t.Failed() {
		t.Logf("the lines with a model label:\n%s", strings.Join(got.Matching("model="), "\n"))
	}
}

// sameVectors requires a and b to agree within 1e-6 per component: the same GGUF
// on the same binary, whichever name it is served under.
func sameVectors(t *testing.T, what string, a, b [][]float64) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d vectors, want %d", what, len(b), len(a))
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			t.Fatalf("%s: vector %d has %d dimensions, want %d", what, i, len(b[i]), len(a[i]))
		}
		for k := range a[i] {
			if math.Abs(a[i][k]-b[i][k]) > 1e-6 {
				t.Fatalf("%s: vector %d component %d is %v, want %v", what, i, k, b[i][k], a[i][k])
			}
		}
	}
}

// TestServeSeveralModels runs one server with the tiny model under two names
// (one with an alias) and the tiny reranker, with a short --keep-alive, and
// checks it against single-model servers of the same GGUFs: each name gets the
// vectors (scores) its GGUF gives alone, an unknown name OpenAI's 404, the wrong
// task a 400, /v1/models lists every name, and a model stopped for idleness
// starts again in a new process with the same vectors, while a model with a
// longer keep-alive of its own keeps its worker.
func TestServeSeveralModels(t *testing.T) {
	_, model := e2e.Paths(t)
	reranker := filepath.Join(filepath.Dir(model), "tiny-reranker.gguf")
	if _, err := os.Stat(reranker); err != nil {
		e2e.Require(t, "missing "+reranker+": run `make models` first")
	}
	inputs := map[string]any{"input": []string{"hello world", "a second, longer input about something else"}}
	const rerankBody = `{"query":"what is a cat?","documents":["a cat is a small feline","stock markets fell today","cats purr"]}`

	// --weights file: the exact bodies below say the file's weight type, which
	// --weights auto would convert on a CPU with AVX-512 BF16.
	single := serveWith(t, "--model", model, "--weights", "file")
	want := e2e.Embeddings(t, single.URL, inputs)
	single.Stop()
	singleRR := serveWith(t, "--model", reranker, "--weights", "file")
	wantScores := rerankScores(t, singleRR.URL, rerankBody)
	singleRR.Stop()

	const keepAlive = 2 * time.Second
	s := serveWith(t, "--model", "small="+model, "--model", "big="+model, "--model", "rr="+reranker,
		"--model-alias", "small=text-embedding-3-small", "--keep-alive", keepAlive.String(), "--keep-alive", "small=1h", "--weights", "file")

	for _, name := range []string{"small", "text-embedding-3-small:query", "big"} {
		body := map[string]any{"model": name, "input": inputs["input"], "input_type": "document"}
		sameVectors(t, name, want, e2e.Embeddings(t, s.URL, body))
	}
	noModel := map[string]any{"input": inputs["input"]}
	sameVectors(t, "no model (the first)", want, e2e.Embeddings(t, s.URL, noModel))
	got := rerankScores(t, s.URL, strings.Replace(rerankBody, "{", `{"model":"rr",`, 1))
	for i := range wantScores {
		if math.Abs(got[i]-wantScores[i]) > 1e-6 {
			t.Fatalf("rr score %d = %v, want %v (the reranker served alone)", i, got[i], wantScores[i])
		}
	}

	checks := []struct {
		path, body string
		status     int
		want       string
	}{
		{"/v1/embeddings", `{"model":"nope","input":"a"}`, 404,
			"{\"error\":{\"message\":\"The model `nope` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}"},
		{"/v1/embeddings", `{"model":"rr","input":"a"}`, 400,
			"{\"error\":{\"message\":\"The model `rr` is a reranker, which does not make embeddings; send query-document pairs to POST /v1/rerank, or name an embedding model (GET /v1/models lists them).\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_task_mismatch\"}}"},
		{"/v1/rerank", `{"model":"big","query":"q","documents":["a"]}`, 400,
			"{\"error\":{\"message\":\"The model `big` is an embedding model, which does not rerank; name a reranker (GET /v1/models lists them), or compare embeddings.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_task_mismatch\"}}"},
		{"/v1/models", "", 200, `{"object":"list","data":[` +
			`{"id":"small","object":"model","created":0,"owned_by":"embed-stack","root":"small","task":"embedding","architecture":"qwen3","pooling":"last","dimensions":64,"context_length":32768,"tokenizer":"BPE","weights":"F16"},` +
			`{"id":"text-embedding-3-small","object":"model","created":0,"owned_by":"embed-stack","root":"small","task":"embedding","architecture":"qwen3","pooling":"last","dimensions":64,"context_length":32768,"tokenizer":"BPE","weights":"F16"},` +
			`{"id":"big","object":"model","created":0,"owned_by":"embed-stack","root":"big","task":"embedding","architecture":"qwen3","pooling":"last","dimensions":64,"context_length":32768,"tokenizer":"BPE","weights":"F16"},` +
			`{"id":"rr","object":"model","created":0,"owned_by":"embed-stack","root":"rr","task":"rerank","architecture":"qwen3","context_length":32768,"tokenizer":"BPE","weights":"F16"}]}`},
		{"/v1/models/big:query", "", 200, `{"id":"big:query","object":"model","created":0,"owned_by":"embed-stack","root":"big","task":"embedding","architecture":"qwen3","pooling":"last","dimensions":64,"context_length":32768,"tokenizer":"BPE","weights":"F16"}`},
		{"/v1/models/nope", "", 404,
			"{\"error\":{\"message\":\"The model `nope` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}"},
	}
	created := regexp.MustCompile(`"created":\d+`)
	for _, c := range checks {
		code, body := call(t, s.URL+c.path, c.body)
		if body = created.ReplaceAllString(body, `"created":0`); code != c.status || body != c.want {
			t.Errorf("%s %s: %d %s\nwant %d %s", c.path, c.body, code, body, c.status, c.want)
		}
	}

	// GET /info describes every model, with its aliases, task and file; a reranker
	// has its scoring instead of an embedding's dimensions and pooling (issue 27).
	code, raw := call(t, s.URL+"/info", "")
	var info struct {
		Models []struct {
			ID       string          `json:"id"`
			Aliases  []string        `json:"aliases"`
			Task     string          `json:"task"`
			Dim      int             `json:"dimensions"`
			Pooling  string          `json:"pooling"`
			File     string          `json:"file"`
			Reranker json.RawMessage `json:"reranker"`
		} `json:"models"`
	}
	if code != 200 || json.Unmarshal([]byte(raw), &info) != nil {
		t.Fatalf("GET /info: %d %s", code, raw)
	}
	var infoLines []string
	for _, m := range info.Models {
		infoLines = append(infoLines, fmt.Sprintf("%s %v %s dimensions=%d pooling=%q file=%s reranker=%s", m.ID, m.Aliases, m.Task, m.Dim, m.Pooling, m.File, m.Reranker))
	}
	dim := len(want[0])
	wantInfo := []string{
		fmt.Sprintf(`small [text-embedding-3-small] embedding dimensions=%d pooling="last" file=tiny.gguf reranker=`, dim),
		fmt.Sprintf(`big [] embedding dimensions=%d pooling="last" file=tiny.gguf reranker=`, dim),
		`rr [] rerank dimensions=0 pooling="" file=tiny-reranker.gguf reranker={"head":"classifier","labels":["yes","no"],"score":"sigmoid(logit(yes) - logit(no)), P(yes) as the model card computes it"}`,
	}
	if !slices.Equal(infoLines, wantInfo) {
		t.Errorf("GET /info models\n%s\nwant\n%s", strings.Join(infoLines, "\n"), strings.Join(wantInfo, "\n"))
	}

	// GET /metrics tells the models apart (issue 17): each request counts under the
	// id of the model it was resolved to, the alias's under its model's; those
	// refused before a model was known (nope, the wrong task) under none. Every
	// embedding request above was two documents (input_type "document", also for
	// the suffixed name, or the default), so each holds the tokens /tokenize counts.
	code, raw = call(t, s.URL+"/tokenize", `{"texts":["hello world","a second, longer input about something else"],"input_type":"document"}`)
	var tok struct {
		Total int `json:"total"`
	}
	if code != 200 || json.Unmarshal([]byte(raw), &tok) != nil || tok.Total <= 0 {
		t.Fatalf("POST /tokenize: %d %s", code, raw)
	}
	requireLines(t, s.URL,
		`embed_stack_http_requests_total{code="200",model="small",route="/v1/embeddings"} 3`,
		`embed_stack_http_requests_total{code="200",model="big",route="/v1/embeddings"} 1`,
		`embed_stack_http_requests_total{code="200",model="rr",route="/v1/rerank"} 1`,
		`embed_stack_http_requests_total{code="200",model="small",route="/tokenize"} 1`,
		`embed_stack_http_requests_total{code="404",route="/v1/embeddings"} 1`,
		`embed_stack_http_requests_total{code="400",route="/v1/embeddings"} 1`,
		`embed_stack_http_requests_total{code="400",route="/v1/rerank"} 1`,
		`embed_stack_http_errors_total{code="404",error_code="model_not_found",route="/v1/embeddings"} 1`,
		`embed_stack_http_errors_total{code="400",error_code="model_task_mismatch",route="/v1/rerank"} 1`,
		`embed_stack_http_request_duration_seconds_count{code="200",model="small",route="/v1/embeddings"} 3`,
		`embed_stack_http_request_duration_seconds_count{code="200",model="big",route="/v1/embeddings"} 1`,
		fmt.Sprintf(`embed_stack_tokens_total{model="small",route="warm"} %d`, 3*tok.Total),
		fmt.Sprintf(`embed_stack_tokens_total{model="big",route="warm"} %d`, tok.Total),
		`embed_stack_request_inputs_count{model="small"} 3`,
		`embed_stack_request_inputs_sum{model="small"} 6`,
		`embed_stack_request_inputs_sum{model="big"} 2`,
		`embed_stack_request_inputs_sum{model="rr"} 3`,
		`embed_stack_stage_duration_seconds_count{model="small",stage="routing.embed"} 3`,
		`embed_stack_stage_duration_seconds_count{model="big",stage="routing.embed"} 1`,
		`embed_stack_stage_duration_seconds_count{model="rr",stage="routing.rerank"} 1`,
		`embed_stack_backend_inflight{model="small",route="warm"} 0`,
		`embed_stack_backend_inflight{model="big",route="warm"} 0`,
		`embed_stack_worker_spawns_total{model="small",outcome="ready",role="warm"} 1`,
		`embed_stack_worker_spawns_total{model="big",outcome="ready",role="warm"} 1`,
		`embed_stack_worker_spawns_total{model="rr",outcome="ready",role="warm"} 1`,
		`embed_stack_warm_ready{model="small"} 1`,
		`embed_stack_warm_ready{model="big"} 1`,
		`embed_stack_warm_ready{model="rr"} 1`,
		`embed_stack_workers{model="small",role="warm"} 1`,
		`embed_stack_warm_restarts_total{model="small"} 0`,
		`embed_stack_warm_cold_starts_total{model="big"} 0`,
		`embed_stack_queue_depth{model="small",queue="ephemeral"} 0`,
	)

	// After the keep-alive, big's worker is stopped; /ready still says ready, and
	// the next request starts a new worker that gives the same vectors.
	before := varsOf(t, s.URL, "big")
	if before.PID == 0 {
		t.Fatal("big has no warm worker right after a request")
	}
	deadline := time.Now().Add(keepAlive + 20*time.Second)
	for varsOf(t, s.URL, "big").PID != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("big's warm worker (pid %d) still runs %s after its last request (--keep-alive %s)", before.PID, keepAlive+20*time.Second, keepAlive)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if small := varsOf(t, s.URL, "small"); small.PID == 0 || small.ColdStarts != 0 {
		t.Errorf("small (--keep-alive small=1h) was stopped with big: %+v", small)
	}
	if err := syscall.Kill(before.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the stopped worker's process %d: kill 0 = %v, want ESRCH (gone)", before.PID, err)
	}
	if code, body := call(t, s.URL+"/ready", ""); code != 200 {
		t.Errorf("/ready with a model stopped by --keep-alive: %d %s, want 200", code, body)
	}
	// Stopped, big has no warm worker and still takes requests.
	requireLines(t, s.URL,
		`embed_stack_workers{model="big",role="warm"} 0`,
		`embed_stack_worker_rss_bytes{model="big",role="warm"} 0`,
		`embed_stack_warm_ready{model="big"} 1`,
		`embed_stack_workers{model="small",role="warm"} 1`)
	start := time.Now()
	sameVectors(t, "big after its cold start", want, e2e.Embeddings(t, s.URL, map[string]any{"model": "big", "input": inputs["input"]}))
	took := time.Since(start)
	after := varsOf(t, s.URL, "big")
	if after.PID == 0 || after.PID == before.PID || after.ColdStarts != 1 || after.LastMS <= 0 {
		t.Fatalf("after the cold start: %+v (before %+v); want a new pid and 1 cold start", after, before)
	}
	t.Logf("cold start of the tiny model: %d ms in the server, %d ms for the request", after.LastMS, took.Milliseconds())
	requireLines(t, s.URL,
		`embed_stack_warm_cold_starts_total{model="big"} 1`,
		`embed_stack_warm_cold_starts_total{model="small"} 0`,
		`embed_stack_worker_spawns_total{model="big",outcome="ready",role="warm"} 2`,
		`embed_stack_worker_spawns_total{model="small",outcome="ready",role="warm"} 1`,
		`embed_stack_http_requests_total{code="200",model="big",route="/v1/embeddings"} 2`,
		`embed_stack_workers{model="big",role="warm"} 1`)
	if err := s.Stop(); err != nil {
		t.Errorf("stop: %v\n%s", err, s.Out)
	}
}

// TestServeRefusesDuplicateModelNames: two models under one name (here the GGUF's
// general.name, as neither entry names its model) or a name that is another's
// alias stop serve at once, naming both entries.
func TestServeRefusesDuplicateModelNames(t *testing.T) {
	bin, model := e2e.Paths(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", model, "--model", model},
			"embed-stack serve: --model \"" + model + "\" and --model \"" + model + "\" are both named \"qwen3-tiny-random-seed1\"; name them apart with --model NAME=MODEL (without NAME= a model is named by its GGUF's general.name)\n"},
		{[]string{"--model", "a=" + model, "--model-alias", "a=b", "--model", "b=" + model},
			"embed-stack serve: --model \"a=" + model + "\" and --model \"b=" + model + "\" are both named \"b\"; name them apart"},
	} {
		cmd := exec.Command(bin, append([]string{"serve", "--addr", e2e.FreeAddr(t)}, c.args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if code := e2e.ExitCode(err); code != 1 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: exit %d\n%s\nwant exit 1 and a line with %s", c.args, code, out.String(), c.want)
		}
	}
}

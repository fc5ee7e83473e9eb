package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/schemacheck"
	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
)

// documentedServer is a Server with every optional route on, described as the
// embed-stack command describes a served model.
func documentedServer(e *fakeEmbedder, ready bool, cfg Config) *Server {
	cfg.ModelName = "qwen3-embedding-0.6b"
	cfg.Aliases = []string{"alias"}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Created = time.Unix(1700000000, 0)
	cfg.DebugVars = true
	cfg.ModelMeta = openai.ModelMeta{Architecture: "qwen3", Pooling: "last", Dimensions: 3, ContextLength: 32768, Tokenizer: "BPE",
		Weights: "BF16", WeightsConvertedFrom: "F16"}
	return &Server{
		Config: cfg, Embedder: e, Ready: func() bool { return ready },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_, _ = io.WriteString(w, "# metrics\n")
		}),
		Info: Info{Device: "cpu", Models: []ModelInfo{{ID: "qwen3-embedding-0.6b", Aliases: []string{"alias"}, Task: "embedding", Pooling: "last",
			ContextLength: 32768, Tokenizer: "BPE", SpecialTokens: "<|endoftext|>", Weights: "BF16", WeightsFrom: "F16",
			Prompts: &Prompts{Family: "qwen3", Query: "Instruct: {instruction}\nQuery:", Instruction: routing.DefaultInstruction},
			Limits:  routing.Limits{Dim: 3, MinDimensions: 1, MaxInputs: 2048, MaxTotalTokens: 300000, MaxInputTokens: 32768, MaxInstructionBytes: 4096},
			File: ModelFile{Source: "Qwen/Qwen3-Embedding-0.6B-GGUF:f16", Name: "Qwen3-Embedding-0.6B-f16.gguf", Size: 1 << 20, Modified: time.Unix(1700000000, 0),
				Digest: func() string { return strings.Repeat("ab", 32) }, Architecture: "qwen3", FileType: "F16", Parameters: 595776512, ContextLength: 32768}},
			// A reranker, whose local file is not hashed yet.
			{ID: "qwen3-reranker-0.6b", Task: "rerank", ContextLength: 32768, Tokenizer: "BPE", SpecialTokens: "<|endoftext|>", Weights: "Q8_0",
				Reranker: &RerankerInfo{Head: "classifier", Labels: []string{"yes", "no"}, Score: "sigmoid(logit(yes) - logit(no))"},
				Limits:   routing.Limits{Dim: 2, MaxInputs: 2048, MaxTotalTokens: 300000, MaxInputTokens: 32768, MaxInstructionBytes: 4096},
				File: ModelFile{Source: "models/reranker.gguf", Name: "reranker.gguf", Size: 639153184, Modified: time.Unix(1700000000, 0),
					Digest: func() string { return "" }, Architecture: "qwen3", FileType: "Q8_0", Parameters: 595776512, ContextLength: 32768}}}},
	}
}

func parseDoc(t *testing.T, raw []byte) *schemacheck.Doc {
	t.Helper()
	doc, err := schemacheck.Parse(raw)
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

// Every route gin serves is in the document, and every documented operation is a
// route: adding one without the other fails here.
func TestOpenAPIRoutesMatchHandlers(t *testing.T) {
	s := documentedServer(&fakeEmbedder{}, true, Config{})
	engine := s.Handler().(*gin.Engine)
	var served []string
	for _, r := range engine.Routes() {
		path := r.Path
		for _, seg := range strings.Split(path, "/") {
			if name, ok := strings.CutPrefix(seg, ":"); ok {
				path = strings.Replace(path, seg, "{"+name+"}", 1)
			}
		}
		served = append(served, r.Method+" "+path)
	}
	doc := parseDoc(t, openAPIDoc)
	var documented []string
	for path, item := range doc.Root["paths"].(map[string]any) {
		for method := range item.(map[string]any) {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	if !slices.Equal(served, documented) {
		t.Errorf("routes differ from openapi.json paths\nserved:     %v\ndocumented: %v", served, documented)
	}
}

// jsonFields lists the JSON names of a struct's fields.
func jsonFields(v any) []string {
	var out []string
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// The native request's fields are exactly NativeRequest's properties (package
// openai checks EmbeddingRequest against its decoder).
func TestOpenAPINativeRequestFields(t *testing.T) {
	doc := parseDoc(t, openAPIDoc)
	if got, want := doc.Properties("NativeRequest"), jsonFields(nativeRequest{}); !slices.Equal(got, want) {
		t.Errorf("NativeRequest properties %v, nativeRequest fields %v", got, want)
	}
}

// Every answer of every route validates against the schema the document gives for
// its status, and every property of the response schemas shows up in some answer.
func TestOpenAPIResponsesMatchHandlers(t *testing.T) {
	served := parseDoc(t, documentedServer(&fakeEmbedder{}, true, Config{}).openAPI(nil))
	type call struct {
		method, path, route, body string
		status                    int
		server                    *Server
		header                    map[string]string
	}
	ready := documentedServer(&fakeEmbedder{}, true, Config{})
	loading := documentedServer(&fakeEmbedder{}, false, Config{})
	keyed := documentedServer(&fakeEmbedder{}, true, Config{APIKeys: []string{"k"}, MaxBodyBytes: 64})
	failing := documentedServer(&fakeEmbedder{err: routing.ErrUnavailable}, true, Config{})
	reranker := documentedServer(&fakeEmbedder{}, true, Config{})
	reranker.Reranker = &fakeReranker{}
	reranker.Info.Models[0].Task = "rerank"
	onGPU := documentedServer(&fakeEmbedder{}, true, Config{})
	// The worker protocol's own Device with every field set, so that a field added
	// to it and not to the document fails here (additionalProperties is false),
	// not only in the schemathesis run of make test-openapi.
	gpuDev := backends.Device{Name: "CUDA0", Description: "NVIDIA H200", Backend: "CUDA", GPU: true, GPULayers: 29,
		MemoryTotal: 150 << 30, MemoryFree: 140 << 30, Note: "n", CPUVariant: "zen4", CPUVariantNote: "n",
		CPUFeatures: []string{"AVX512", "AVX512_BF16"}, CPUVendor: "AuthenticAMD", CPUAccel: "embed-stack kernels (AVX-512, BF16)", CPUAccelBF16: true, Warning: "w"}
	for v, i := reflect.ValueOf(gpuDev), 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Fatalf("backends.Device.%s is not set in this test: set it, so that GET /health is checked against the document with it", v.Type().Field(i).Name)
		}
	}
	onGPU.Device = func() any { return gpuDev }
	onGPU.CPUVariant = func() string { return "zen4" }
	idle := documentedServer(&fakeEmbedder{}, true, Config{})
	idle.Loads = func(string) ModelLoad {
		return ModelLoad{Loaded: true, PID: 7, IdleSince: time.Now().Add(-time.Second), Expires: time.Now().Add(time.Minute)}
	}
	unhealthy := documentedServer(&fakeEmbedder{}, true, Config{})
	unhealthy.Healthy = func() bool { return false }
	calls := []call{
		{"POST", "/v1/embeddings", "", `{"input":["a","b"]}`, 200, ready, nil},
		{"POST", "/v1/embeddings", "", `{"input":"a","encoding_format":"base64"}`, 200, ready, nil},
		{"POST", "/v1/embeddings", "", `{"input":"a","encoding_format":"int8"}`, 200, ready, nil},
		{"POST", "/v1/embeddings", "", `{"input":"a","output_dtype":"ubinary"}`, 200, ready, nil},
		{"POST", "/v1/embeddings", "", `{"input":"a","encoding_format":"base64","embedding_types":["binary"]}`, 200, ready, nil},
		{"POST", "/v1/embeddings", "", `{"input":["a","b"]}`, 200, documentedServer(&fakeEmbedder{cached: true}, true, Config{}), nil},
		{"POST", "/v1/embeddings", "", `{"input":[]}`, 400, ready, nil},
		{"POST", "/v1/embeddings", "", `{"input":"a","model":"other"}`, 404, documentedServer(&fakeEmbedder{}, true, Config{StrictModel: true}), nil},
		{"POST", "/v1/embeddings", "", `{"input":"a"}`, 401, keyed, nil},
		{"POST", "/v1/embeddings", "", `{"input":"` + strings.Repeat("a", 100) + `"}`, 413, keyed, map[string]string{"Authorization": "Bearer k"}},
		{"POST", "/v1/embeddings", "", `{"input":"a"}`, 503, failing, nil},
		{"GET", "/v1/models", "", "", 200, ready, nil},
		{"GET", "/v1/models/alias", "/v1/models/{model}", "", 200, ready, nil},
		{"GET", "/v1/models/nope", "/v1/models/{model}", "", 200, ready, nil},
		{"GET", "/v1/models/nope", "/v1/models/{model}", "", 404, documentedServer(&fakeEmbedder{}, true, Config{StrictModel: true}), nil},
		{"POST", "/embed", "", `{"texts":["a"],"truncate":"start"}`, 200, ready, nil},
		{"POST", "/embed", "", `{"texts":["a"],"truncate":"middle"}`, 400, ready, nil},
		{"POST", "/tokenize", "", `{"text":"a"}`, 200, ready, nil},
		{"POST", "/tokenize", "", `{"texts":["a","b"]}`, 200, ready, nil},
		{"POST", "/tokenize", "", `{"text":"a","model":"other"}`, 404, documentedServer(&fakeEmbedder{}, true, Config{StrictModel: true}), nil},
		{"POST", "/embed", "", `{"texts":["a"],"model":"other"}`, 404, documentedServer(&fakeEmbedder{}, true, Config{StrictModel: true}), nil},
		{"GET", "/info", "", "", 200, ready, nil},
		{"GET", "/info", "", "", 200, reranker, nil},
		{"POST", "/v1/rerank", "", `{"model":"m","query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":true}`, 200, reranker, nil},
		{"POST", "/v1/rerank", "", `{"query":"q","documents":["a","b"]}`, 200, reranker, nil},
		{"POST", "/v1/rerank", "", `{"query":"q","documents":"a"}`, 400, reranker, nil},
		{"POST", "/v1/rerank", "", `{"query":"q","documents":["a"]}`, 404, ready, nil},
		{"POST", "/v1/rerank", "", `{"query":"q","documents":["a"]}`, 401, keyed, nil},
		{"POST", "/rerank", "", `{"query":"q","texts":["a","b"],"return_text":true}`, 200, reranker, nil},
		{"POST", "/rerank", "", `{"query":"q","texts":["a"],"raw_scores":true}`, 200, reranker, nil},
		{"POST", "/rerank", "", `{"query":"q","texts":["a"],"truncate":true,"truncation_direction":"up"}`, 400, reranker, nil},
		{"POST", "/rerank", "", `{"query":"q","texts":["a"],"truncate":true,"truncation_direction":"Left","return_text":true}`, 200, reranker, nil},
		{"POST", "/rerank", "", `{"query":"q","documents":["a"],"return_documents":true}`, 200, reranker, nil},
		{"POST", "/rerank", "", `{"query":"q","texts":["a"]}`, 404, ready, nil},
		{"POST", "/embed", "", `{"inputs":"a"}`, 200, ready, nil},
		{"POST", "/embed", "", `{"inputs":["a","b"],"normalize":false,"prompt_name":"query","truncate":true,"truncation_direction":"left","dimensions":2}`, 200, ready, nil},
		{"POST", "/embed", "", `{"inputs":[]}`, 400, ready, nil},
		{"POST", "/embed", "", `{"inputs":"a","texts":["a"]}`, 422, ready, nil},
		{"POST", "/embed", "", `{"inputs":"a"}`, 424, documentedServer(&fakeEmbedder{err: errors.New("engine")}, true, Config{}), nil},
		{"POST", "/embed", "", `{"inputs":"a"}`, 503, failing, nil},
		{"POST", "/", "", `{"inputs":["a"]}`, 200, ready, nil},
		{"GET", "/", "", "", 200, keyed, nil},
		{"POST", "/", "", `{"query":"q","texts":["a","b"],"return_text":true}`, 200, reranker, nil},
		{"HEAD", "/", "", "", 200, keyed, nil},
		{"POST", "/embed", "", `{"inputs":"a","model":"other"}`, 404, documentedServer(&fakeEmbedder{}, true, Config{StrictModel: true}), nil},
		{"POST", "/", "", `{"inputs":"a","model":"other"}`, 404, documentedServer(&fakeEmbedder{}, true, Config{StrictModel: true}), nil},
		{"POST", "/", "", `{"inputs":1}`, 422, ready, nil},
		{"POST", "/", "", `{"inputs":`, 400, ready, nil},
		{"POST", "/", "", `{"inputs":"a"}`, 401, keyed, nil},
		{"POST", "/embed_all", "", `{"inputs":"a"}`, 424, ready, nil},
		{"POST", "/embed_all", "", `{"inputs":"a"}`, 401, keyed, nil},
		{"POST", "/api/embed", "", `{"model":"m","input":["a","b"]}`, 200, ready, nil},
		{"POST", "/api/embed", "", `{"model":"m","input":""}`, 200, ready, nil},
		{"POST", "/api/embed", "", `{"model":"m","input":[1]}`, 400, ready, nil},
		{"POST", "/api/embed", "", `{"model":"m","input":"a"}`, 404, documentedServer(&fakeEmbedder{}, true, Config{StrictModel: true}), nil},
		{"POST", "/api/embed", "", `{"model":"m","input":"a"}`, 503, failing, nil},
		{"POST", "/api/embed", "", `{"model":"m","input":"a"}`, 401, keyed, nil},
		{"POST", "/api/embeddings", "", `{"model":"m","prompt":"a"}`, 200, ready, nil},
		{"POST", "/api/embeddings", "", `{"prompt":"a"}`, 400, ready, nil},
		{"GET", "/api/tags", "", "", 200, ready, nil},
		{"GET", "/api/ps", "", "", 200, ready, nil},
		{"GET", "/api/ps", "", "", 200, idle, nil},
		{"GET", "/api/ps", "", "", 401, keyed, nil},
		{"GET", "/api/version", "", "", 200, ready, nil},
		{"POST", "/api/show", "", `{"model":"qwen3-embedding-0.6b"}`, 200, ready, nil},
		{"POST", "/api/show", "", `{}`, 400, ready, nil},
		{"GET", "/health", "", "", 200, ready, nil},
		{"GET", "/health", "", "", 200, onGPU, nil},
		{"GET", "/info", "", "", 200, onGPU, nil},
		{"GET", "/health", "", "", 503, unhealthy, nil},
		{"GET", "/ready", "", "", 200, ready, nil},
		{"GET", "/ready", "", "", 503, loading, nil},
		{"GET", "/openapi.json", "", "", 200, ready, nil},
		{"GET", "/docs", "", "", 200, ready, nil},
		{"GET", "/metrics", "", "", 200, ready, nil},
		{"GET", "/debug/vars", "", "", 200, ready, nil},
	}
	handlers := map[*Server]http.Handler{}
	for _, c := range calls {
		h, ok := handlers[c.server]
		if !ok {
			h = c.server.Handler()
			handlers[c.server] = h
		}
		w := do(h, c.method, c.path, c.body, c.header)
		name := c.method + " " + c.path + " " + c.body
		if w.Code != c.status {
			t.Errorf("%s: status %d, want %d; body %s", name, w.Code, c.status, w.Body)
			continue
		}
		route := c.route
		if route == "" {
			route = c.path
		}
		resp, ok := dig(served.Root, "paths", route, strings.ToLower(c.method), "responses", itoa(c.status))
		if !ok {
			t.Errorf("%s: status %d is not documented", name, c.status)
			continue
		}
		if c.method == http.MethodHead {
			continue // no body
		}
		content := resp["content"].(map[string]any)
		ct, _, _ := strings.Cut(w.Header().Get("Content-Type"), ";")
		media, ok := content[ct].(map[string]any)
		if !ok {
			t.Errorf("%s: Content-Type %q is not documented (%v)", name, ct, content)
			continue
		}
		// One schema, or one of several (POST /rerank answers in TEI's shape or
		// Cohere's): the answer must match one.
		schema := media["schema"].(map[string]any)
		alts := []any{schema}
		if oneOf, ok := schema["oneOf"].([]any); ok {
			alts = oneOf
		}
		var errs []error
		for _, alt := range alts {
			ref, _ := alt.(map[string]any)["$ref"].(string)
			if ref == "" {
				errs = nil
				break // free-form (text, HTML, the document itself)
			}
			err := served.Validate(ref[strings.LastIndex(ref, "/")+1:], w.Body.Bytes())
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			t.Errorf("%s: %v\nbody: %s", name, errs, w.Body)
		}
	}
	for _, schema := range []string{"RerankResponse", "RerankResult", "TEIRerankResult", "EmbeddingResponse", "Embedding", "EmbedResponse", "TokenizeResponse", "TokenizeResult", "Model", "ModelList", "ModelInfo", "Info", "Status", "Device", "Error",
		"OllamaError", "TEIError", "OllamaEmbedResponse", "OllamaEmbeddingResponse", "OllamaModel", "OllamaModelDetails", "OllamaTags", "OllamaShowResponse", "OllamaVersion"} {
		for _, p := range served.Properties(schema) {
			if !served.Seen[schema+"."+p] {
				t.Errorf("%s.%s is documented but no answer carried it", schema, p)
			}
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// dig walks nested objects by key.
func dig(m map[string]any, keys ...string) (map[string]any, bool) {
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}

// The served document carries the served model's bounds and the build's version.
func TestOpenAPIFilledFromServer(t *testing.T) {
	s := documentedServer(&fakeEmbedder{}, true, Config{})
	s.Info.Models[0].Limits.Dim, s.Info.Models[0].Limits.MinDimensions = 1024, 32
	for i := range s.Info.Models { // --max-inputs applies to every model
		s.Info.Models[i].Limits.MaxInputs = 100
	}
	doc := parseDoc(t, s.openAPI(nil))
	dims := doc.Schema("Dimensions")
	if dims["minimum"] != 32.0 || dims["maximum"] != 1024.0 {
		t.Errorf("Dimensions bounds %v..%v, want 32..1024", dims["minimum"], dims["maximum"])
	}
	if got := doc.Schema("TextInputs")["maxItems"]; got != 100.0 {
		t.Errorf("TextInputs maxItems %v, want 100", got)
	}
	// Every input array the server bounds by --max-inputs, and TEI's dimensions.
	prop := func(schema, name string) map[string]any {
		p, _ := doc.Schema(schema)["properties"].(map[string]any)[name].(map[string]any)
		return p
	}
	second := func(p map[string]any) map[string]any { return p["anyOf"].([]any)[1].(map[string]any) }
	for what, got := range map[string]any{
		"NativeRequest.texts":      prop("NativeRequest", "texts")["maxItems"],
		"OllamaEmbedRequest.input": second(prop("OllamaEmbedRequest", "input"))["maxItems"],
		"TEIEmbedRequest.inputs":   second(prop("TEIEmbedRequest", "inputs"))["maxItems"],
		"RerankRequest.documents":  prop("RerankRequest", "documents")["maxItems"],
		"TEIRerankRequest.texts":   prop("TEIRerankRequest", "texts")["maxItems"],
	} {
		if got != 100.0 {
			t.Errorf("%s maxItems %v, want 100 (--max-inputs)", what, got)
		}
	}
	if d := prop("TEIEmbedRequest", "dimensions"); d["minimum"] != 32.0 || d["maximum"] != 1024.0 {
		t.Errorf("TEIEmbedRequest.dimensions %v..%v, want 32..1024", d["minimum"], d["maximum"])
	}
	s.Config.DebugVars = false
	if strings.Contains(string(s.openAPI(nil)), `"/debug/vars"`) {
		t.Error("/debug/vars is documented on a server without --debug-vars (it answers 404 there)")
	}
	s.Config.DebugVars = true
	if !strings.Contains(string(s.openAPI(nil)), `"/debug/vars"`) {
		t.Error("/debug/vars is not documented with --debug-vars")
	}
}

// The served document lists its tags, every operation names one of them, and it keeps
// the hand-written order (a map would sort /debug/vars first): /docs and any OpenAPI
// viewer group and order operations from these.
func TestOpenAPITagsAndOrder(t *testing.T) {
	served := documentedServer(&fakeEmbedder{}, true, Config{}).openAPI(nil)
	var doc struct {
		Tags []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"tags"`
		Paths map[string]map[string]struct {
			Tags []string `json:"tags"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(served, &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tag := range doc.Tags {
		names = append(names, tag.Name)
		if tag.Description == "" {
			t.Errorf("tag %s has no description", tag.Name)
		}
	}
	if len(names) == 0 || names[0] != "OpenAI" {
		t.Errorf("tags %v, want OpenAI's first", names)
	}
	for path, item := range doc.Paths {
		for method, op := range item {
			if len(op.Tags) == 0 || !slices.Contains(names, op.Tags[0]) {
				t.Errorf("%s %s: tags %v, none of the listed %v", method, path, op.Tags, names)
			}
		}
	}
	// Paths in the file's order; the figures filled in.
	var src struct {
		Paths orderedKeys `json:"paths"`
	}
	var out struct {
		Paths      orderedKeys `json:"paths"`
		Components struct {
			Schemas struct {
				Dimensions struct{ Minimum, Maximum int }
			}
		}
	}
	if err := json.Unmarshal(openAPIDoc, &src); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(served, &out); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(src.Paths, out.Paths) || src.Paths[0] != "/v1/embeddings" {
		t.Errorf("served paths %v\nfile's paths %v\nwant the file's order, /v1/embeddings first", out.Paths, src.Paths)
	}
	if d := out.Components.Schemas.Dimensions; d.Minimum != 1 || d.Maximum != 3 {
		t.Errorf("Dimensions %+v, want the served model's 1..3", d)
	}
}

// orderedKeys decodes a JSON object into its keys, in order.
type orderedKeys []string

func (k *orderedKeys) UnmarshalJSON(b []byte) error {
	v, err := decodeOrdered(b)
	if err != nil {
		return err
	}
	o, ok := v.(*ordered)
	if !ok {
		return fmt.Errorf("not an object: %.40s", b)
	}
	*k = o.keys
	return nil
}

// GET /info: an embedding model has its dimensions, pooling and output types, a
// reranker its scoring instead; sha256 is null until known (issue 27).
func TestInfoPerModel(t *testing.T) {
	h := documentedServer(&fakeEmbedder{}, true, Config{}).Handler()
	w := do(h, "GET", "/info", "", nil)
	var body struct {
		Models []map[string]any `json:"models"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body.Models) != 2 {
		t.Fatalf("GET /info: %d %s (%v)", w.Code, w.Body, err)
	}
	emb, rr := body.Models[0], body.Models[1]
	for _, k := range []string{"dimensions", "min_dimensions", "pooling", "output_types"} {
		if _, ok := emb[k]; !ok {
			t.Errorf("the embedding model has no %s: %v", k, emb)
		}
		if _, ok := rr[k]; ok {
			t.Errorf("the reranker has %s, which means nothing for one: %v", k, rr)
		}
	}
	if _, ok := emb["reranker"]; ok {
		t.Errorf("the embedding model has reranker: %v", emb)
	}
	if emb["sha256"] != strings.Repeat("ab", 32) || rr["sha256"] != nil {
		t.Errorf("sha256 %v and %v, want the known one and null", emb["sha256"], rr["sha256"])
	}
	if fmt.Sprint(rr["reranker"]) != "map[head:classifier labels:[yes no] score:sigmoid(logit(yes) - logit(no))]" || rr["quantization"] != "Q8_0" || rr["source"] != "models/reranker.gguf" {
		t.Errorf("reranker %v", rr)
	}
}

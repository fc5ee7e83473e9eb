package server

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/routing"
)

// multiServer serves two embedding models (the first with an alias) and a
// reranker, each with its own fake, as `serve --model a=... --model b=...` does.
func multiServer() (http.Handler, *fakeEmbedder, *fakeEmbedder, *fakeReranker) {
	a, b, r := &fakeEmbedder{}, &fakeEmbedder{}, &fakeReranker{}
	s := &Server{
		Config: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Created: time.Unix(1700000000, 0)},
		Models: []Model{
			{ID: "small", Aliases: []string{"text-embedding-3-small"}, Embedder: a},
			{ID: "big", Embedder: b},
			{ID: "rr", Aliases: []string{"rerank-v3.5"}, Rerank: true, Embedder: &fakeEmbedder{}, Reranker: r},
		},
	}
	return s.Handler(), a, b, r
}

const notFoundNope = "{\"error\":{\"message\":\"The model `nope` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}"

func TestSeveralModelsRouteByName(t *testing.T) {
	tests := []struct {
		name, path, body string
		status           int
		want             string // the exact body, or "" to check only where the request went
		to               string // "small", "big", "rr" or "" (reached no model)
		inputType        string
	}{
		{"by id", "/v1/embeddings", `{"model":"big","input":"x"}`, 200, "", "big", ""},
		{"by alias with suffix", "/v1/embeddings", `{"model":"text-embedding-3-small:query","input":"x"}`, 200, "", "small", "query"},
		{"no model is the first embedding model", "/v1/embeddings", `{"input":"x"}`, 200,
			`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0,0.5,-0.25]}],"model":"small","usage":{"prompt_tokens":7,"total_tokens":7}}`, "small", ""},
		{"unknown name", "/v1/embeddings", `{"model":"nope","input":"x"}`, 404, notFoundNope, "", ""},
		{"unknown name with suffix", "/v1/embeddings", `{"model":"nope:query","input":"x"}`, 404,
			"{\"error\":{\"message\":\"The model `nope:query` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}", "", ""},
		{"embedding on the reranker", "/v1/embeddings", `{"model":"rr","input":"x"}`, 400,
			"{\"error\":{\"message\":\"The model `rr` is a reranker, which does not make embeddings; send query-document pairs to POST /v1/rerank, or name an embedding model (GET /v1/models lists them).\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_task_mismatch\"}}", "", ""},
		{"rerank by alias", "/v1/rerank", `{"model":"rerank-v3.5","query":"q","documents":["a"]}`, 200, "", "rr", ""},
		{"rerank without model", "/v1/rerank", `{"query":"q","documents":["a"]}`, 200, "", "rr", ""},
		{"rerank on an embedding model", "/v1/rerank", `{"model":"big","query":"q","documents":["a"]}`, 400,
			"{\"error\":{\"message\":\"The model `big` is an embedding model, which does not rerank; name a reranker (GET /v1/models lists them), or compare embeddings.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_task_mismatch\"}}", "", ""},
		{"rerank unknown", "/v1/rerank", `{"model":"nope","query":"q","documents":["a"]}`, 404, notFoundNope, "", ""},
		{"tei rerank", "/rerank", `{"query":"q","texts":["a"]}`, 200, "", "rr", ""},
		// One rule for names (issue 28): "" and a bare suffix name no model, and a
		// reranker takes no input-type suffix.
		{"empty name", "/v1/embeddings", `{"model":"","input":"x"}`, 400,
			`{"error":{"message":"'model' is an empty string; name a model (GET /v1/models lists them), or leave the field out for the default.","type":"invalid_request_error","param":"model","code":null}}`, "", ""},
		{"bare suffix", "/v1/embeddings", `{"model":":query","input":"x"}`, 400,
			"{\"error\":{\"message\":\"The model `:query` has no name before its input-type suffix; name a model (GET /v1/models lists them), as in `NAME:query`, or leave the field out for the default.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"invalid_value\"}}", "", ""},
		{"rerank empty name", "/v1/rerank", `{"model":"","query":"q","documents":["a"]}`, 400,
			`{"error":{"message":"'model' is an empty string; name a model (GET /v1/models lists them), or leave the field out for the default.","type":"invalid_request_error","param":"model","code":null}}`, "", ""},
		{"rerank bare suffix", "/v1/rerank", `{"model":":document","query":"q","documents":["a"]}`, 400,
			"{\"error\":{\"message\":\"The model `:document` has no name before its input-type suffix; name a model (GET /v1/models lists them), as in `NAME:document`, or leave the field out for the default.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"invalid_value\"}}", "", ""},
		{"rerank with a suffix", "/v1/rerank", `{"model":"rr:query","query":"q","documents":["a"]}`, 400,
			"{\"error\":{\"message\":\"The model `rr` is a reranker, which takes no input type; send `rr` without the suffix `:query`.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"invalid_value\"}}", "", ""},
		{"native embed", "/embed", `{"texts":["a"]}`, 200, "", "small", ""},
		{"tokenize", "/tokenize", `{"text":"a"}`, 200, "", "small", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, small, big, rr := multiServer()
			w := do(h, "POST", tt.path, tt.body, nil)
			if w.Code != tt.status || (tt.want != "" && w.Body.String() != tt.want) {
				t.Fatalf("got %d %s\nwant %d %s", w.Code, w.Body, tt.status, tt.want)
			}
			reached := map[string]bool{"small": small.last != nil, "big": big.last != nil, "rr": rr.last != nil}
			for name, got := range reached {
				if got != (name == tt.to) {
					t.Errorf("model %s reached: %v; want only %q", name, got, tt.to)
				}
			}
			if tt.to == "small" && small.last.InputType != tt.inputType {
				t.Errorf("input type %q, want %q", small.last.InputType, tt.inputType)
			}
		})
	}
}

func TestSeveralModelsList(t *testing.T) {
	h, _, _, _ := multiServer()
	// root names the model that answers, task what it does (issue 27).
	roots := map[string]string{"small": "small", "text-embedding-3-small": "small", "big:query": "big",
		"text-embedding-3-small:Document": "small", "big": "big", "rr": "rr", "rerank-v3.5": "rr"}
	model := func(id string) string {
		task := "embedding"
		if roots[id] == "rr" {
			task = "rerank"
		}
		return `{"id":"` + id + `","object":"model","created":1700000000,"owned_by":"embed-stack","root":"` + roots[id] + `","task":"` + task + `"}`
	}
	want := `{"object":"list","data":[` + model("small") + "," + model("text-embedding-3-small") + "," + model("big") + "," +
		model("rr") + "," + model("rerank-v3.5") + `]}`
	if w := do(h, "GET", "/v1/models", "", nil); w.Code != 200 || w.Body.String() != want {
		t.Fatalf("GET /v1/models: %d %s\nwant %s", w.Code, w.Body, want)
	}
	// Every name /v1/embeddings or /v1/rerank accepts, and nothing else.
	for _, id := range []string{"small", "text-embedding-3-small", "big:query", "text-embedding-3-small:Document", "rr", "rerank-v3.5"} {
		if w := do(h, "GET", "/v1/models/"+id, "", nil); w.Code != 200 || w.Body.String() != model(id) {
			t.Errorf("GET /v1/models/%s: %d %s", id, w.Code, w.Body)
		}
	}
	for _, id := range []string{"nope", "big:querry", "nope:query", "rr:query", "rerank-v3.5:document", ":query"} {
		want := "{\"error\":{\"message\":\"The model `" + id + "` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}"
		if w := do(h, "GET", "/v1/models/"+id, "", nil); w.Code != 404 || w.Body.String() != want {
			t.Errorf("GET /v1/models/%s: %d %s\nwant 404 %s", id, w.Code, w.Body, want)
		}
	}
}

// TestOpenAPIPerModel: GET /openapi.json gives the widest bounds of the served
// embedding models (issue 28: the first model's, 64 when another took 1024, or a
// reranker's), and ?model= one model's own; an unknown model is 404.
func TestOpenAPIPerModel(t *testing.T) {
	lim := func(dim int) routing.Limits {
		return routing.Limits{Dim: dim, MinDimensions: 32, MaxInputs: 2048, MaxTotalTokens: 300000, MaxInputTokens: 32768, MaxInstructionBytes: 4096}
	}
	s := &Server{
		Config: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Created: time.Unix(1700000000, 0)},
		Models: []Model{
			{ID: "rr", Rerank: true, Embedder: &fakeEmbedder{}, Reranker: &fakeReranker{}},
			{ID: "small", Aliases: []string{"s"}, Embedder: &fakeEmbedder{}},
			{ID: "big", Embedder: &fakeEmbedder{}},
		},
		Info: Info{Models: []ModelInfo{
			{ID: "rr", Task: "rerank", Limits: lim(2)},
			{ID: "small", Aliases: []string{"s"}, Task: "embedding", Limits: lim(64)},
			{ID: "big", Task: "embedding", Limits: lim(1024)},
		}},
	}
	h := s.Handler()
	bounds := func(path string) string {
		w := do(h, "GET", path, "", nil)
		if w.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		var doc struct {
			Components struct {
				Schemas struct {
					Dimensions struct{ Minimum, Maximum int }
				}
			}
		}
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d..%d", doc.Components.Schemas.Dimensions.Minimum, doc.Components.Schemas.Dimensions.Maximum)
	}
	for path, want := range map[string]string{
		"/openapi.json":               "32..1024",
		"/openapi.json?model=small":   "32..64",
		"/openapi.json?model=s:query": "32..64",
		"/openapi.json?model=big":     "32..1024",
		"/openapi.json?model=rr":      "32..1024", // a reranker takes none: its document's embedding routes take the server's embedding models'
	} {
		if got := bounds(path); got != want {
			t.Errorf("GET %s: dimensions %s, want %s", path, got, want)
		}
	}
	if w := do(h, "GET", "/openapi.json?model=nope", "", nil); w.Code != 404 || !strings.Contains(w.Body.String(), "model_not_found") {
		t.Errorf("unknown model: %d %s", w.Code, w.Body)
	}
}

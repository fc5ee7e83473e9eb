package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"testing"

	"github.com/embed-stack/embed-stack/routing"
)

// fakeReranker scores document i as 0.1 * (i % 3) and records the request.
type fakeReranker struct {
	last *routing.RerankRequest
	err  error
}

func (f *fakeReranker) Rerank(_ context.Context, req *routing.RerankRequest) (*routing.RerankResult, error) {
	f.last = req
	if f.err != nil {
		return nil, f.err
	}
	res := &routing.RerankResult{Tokens: 10 * len(req.Documents)}
	for i := range req.Documents {
		res.Scores = append(res.Scores, 0.1*float64(i%3))
		res.Logits = append(res.Logits, float64(i%3)-1)
	}
	return res, nil
}

func newRerankServer(cfg Config, r Reranker) http.Handler {
	cfg.ModelName = "qwen3-reranker-0.6b"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return (&Server{Config: cfg, Embedder: &fakeEmbedder{}, Reranker: r}).Handler()
}

var idRe = regexp.MustCompile(`"id":"[0-9a-f]{32}",`)

func TestRerankShapes(t *testing.T) {
	tests := []struct {
		name, path, body, want string
		wantInstruction        string
		wantTruncate           routing.Truncation
	}{
		{"cohere strings", "/v1/rerank", `{"model":"rerank-v3.5","query":"q","documents":["a","b","c","d"]}`,
			`{"model":"rerank-v3.5","results":[{"index":2,"relevance_score":0.2},{"index":1,"relevance_score":0.1},{"index":0,"relevance_score":0},{"index":3,"relevance_score":0}],"usage":{"prompt_tokens":40,"total_tokens":40}}`, "", routing.NoTruncation},
		{"jina objects top_n documents", "/v1/rerank", `{"query":"q","documents":[{"text":"a"},{"text":"b","title":"x"},"c"],"top_n":2,"return_documents":true,"instruction":"Find"}`,
			`{"model":"qwen3-reranker-0.6b","results":[{"index":2,"relevance_score":0.2,"document":{"text":"c"}},{"index":1,"relevance_score":0.1,"document":{"text":"b"}}],"usage":{"prompt_tokens":30,"total_tokens":30}}`, "Find", routing.NoTruncation},
		{"tei", "/rerank", `{"query":"q","texts":["a","b","c"]}`,
			`[{"index":2,"score":0.2},{"index":1,"score":0.1},{"index":0,"score":0}]`, "", routing.NoTruncation},
		{"tei raw text", "/rerank", `{"query":"q","texts":["a","b"],"raw_scores":true,"return_text":true,"truncate":false}`,
			`[{"index":1,"score":0,"text":"b"},{"index":0,"score":-1,"text":"a"}]`, "", routing.NoTruncation},
		// TEI's truncation, as Haystack's HuggingFaceTEIRanker sends it.
		{"tei truncate", "/rerank", `{"query":"q","texts":["a"],"truncate":true}`, `[{"index":0,"score":0}]`, "", routing.TruncateEnd},
		{"tei truncate left", "/rerank", `{"query":"q","texts":["a"],"truncate":true,"truncation_direction":"Left"}`, `[{"index":0,"score":0}]`, "", routing.TruncateStart},
		{"tei direction alone", "/rerank", `{"query":"q","texts":["a"],"truncation_direction":"left"}`, `[{"index":0,"score":0}]`, "", routing.NoTruncation},
		// At TEI's root, as a reranker's TEI serves rerank there.
		{"tei at the root", "/", `{"query":"q","texts":["a","b","c"]}`,
			`[{"index":2,"score":0.2},{"index":1,"score":0.1},{"index":0,"score":0}]`, "", routing.NoTruncation},
		// Cohere's and Jina's shape on /rerank (vLLM's and Infinity's, as LiteLLM posts it).
		{"documents on /rerank", "/rerank", `{"model":"m","query":"q","documents":["a","b"],"top_n":1}`,
			`{"model":"m","results":[{"index":1,"relevance_score":0.1}],"usage":{"prompt_tokens":20,"total_tokens":20}}`, "", routing.NoTruncation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeReranker{}
			w := do(newRerankServer(Config{}, f), "POST", tt.path, tt.body, nil)
			got := idRe.ReplaceAllString(w.Body.String(), "")
			if w.Code != http.StatusOK || got != tt.want {
				t.Fatalf("%d %s\nwant 200 %s", w.Code, w.Body.String(), tt.want)
			}
			if f.last.Query != "q" {
				t.Errorf("query %q", f.last.Query)
			}
			if (f.last.Instruction == nil) != (tt.wantInstruction == "") || (f.last.Instruction != nil && *f.last.Instruction != tt.wantInstruction) {
				t.Errorf("instruction %v, want %q", f.last.Instruction, tt.wantInstruction)
			}
			if f.last.Truncate != tt.wantTruncate {
				t.Errorf("truncation %d, want %d", f.last.Truncate, tt.wantTruncate)
			}
		})
	}
}

func TestRerankErrorsServer(t *testing.T) {
	tests := []struct {
		name, path, body string
		reranker         Reranker
		cfg              Config
		status           int
		want             string
	}{
		{"no query", "/v1/rerank", `{"documents":["a"]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"'query' is a required property.","type":"invalid_request_error","param":"query","code":null}}`},
		{"bad document", "/v1/rerank", `{"query":"q","documents":["a",{"txt":"b"}]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"document 1 is {\"txt\":\"b\"}; each document is a string or an object with a string 'text'","type":"invalid_request_error","param":"documents","code":null}}`},
		{"bad top_n", "/v1/rerank", `{"query":"q","documents":["a"],"top_n":0}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"0 is not a positive integer - 'top_n'","type":"invalid_request_error","param":"top_n","code":null}}`},
		{"tei direction", "/rerank", `{"query":"q","texts":["a"],"truncate":true,"truncation_direction":"up"}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"\"up\" is not one of ['Left', 'Right'] - 'truncation_direction'","type":"invalid_request_error","param":"truncation_direction","code":null}}`},
		{"texts and documents", "/rerank", `{"query":"q","texts":["a"],"documents":["a"]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"Send 'texts' (text-embeddings-inference's shape) or 'documents' (Cohere's and Jina's), not both.","type":"invalid_request_error","param":"documents","code":"invalid_value"}}`},
		{"tei strict model", "/rerank", `{"model":"other","query":"q","texts":["a"]}`, &fakeReranker{}, Config{StrictModel: true}, 404,
			`{"error":{"message":"The model ` + "`other`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
		{"strict model", "/v1/rerank", `{"model":"other","query":"q","documents":["a"]}`, &fakeReranker{}, Config{StrictModel: true}, 404,
			`{"error":{"message":"The model ` + "`other`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
		{"routing refusal", "/v1/rerank", `{"query":"q","documents":["a"]}`, &fakeReranker{err: &routing.InputError{Param: "documents", Index: 0, Code: routing.CodeContextLength, Message: "too long"}}, Config{}, 400,
			`{"error":{"message":"too long","type":"invalid_request_error","param":"documents","code":"context_length_exceeded"}}`},
		// Keys are matched exactly, as on /v1/embeddings: another case is an
		// unknown field, and a key twice is refused.
		{"wrong-case key", "/v1/rerank", `{"Query":"q","documents":["a"]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"'query' is a required property.","type":"invalid_request_error","param":"query","code":null}}`},
		{"duplicate key", "/v1/rerank", `{"query":"q","documents":["a"],"documents":["b","c"]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"The JSON body holds the key 'documents' more than once; send each key once.","type":"invalid_request_error","param":"documents","code":null}}`},
		{"duplicate key v2", "/v2/rerank", `{"query":"q","query":"r","documents":["a"]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"The JSON body holds the key 'query' more than once; send each key once.","type":"invalid_request_error","param":"query","code":null}}`},
		{"document Text", "/v1/rerank", `{"query":"q","documents":[{"Text":"a"}]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"document 0 is {\"Text\":\"a\"}; each document is a string or an object with a string 'text'","type":"invalid_request_error","param":"documents","code":null}}`},
		{"tei wrong-case key", "/rerank", `{"query":"q","TEXTS":["a"]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"'texts' is a required property.","type":"invalid_request_error","param":"texts","code":null}}`},
		{"tei duplicate key", "/rerank", `{"query":"q","texts":["a"],"texts":["b"]}`, &fakeReranker{}, Config{}, 400,
			`{"error":{"message":"The JSON body holds the key 'texts' more than once; send each key once.","type":"invalid_request_error","param":"texts","code":null}}`},
		{"no reranker", "/rerank", `{"query":"q","texts":["a"]}`, nil, Config{}, 404,
			`{"error":{"message":"This server does not rerank: /rerank needs a reranker model.","type":"invalid_request_error","param":null,"code":"not_found"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(newRerankServer(tt.cfg, tt.reranker), "POST", tt.path, tt.body, nil)
			if w.Code != tt.status || w.Body.String() != tt.want {
				t.Errorf("%d %s\nwant %d %s", w.Code, w.Body.String(), tt.status, tt.want)
			}
			var env map[string]any
			if json.Unmarshal(w.Body.Bytes(), &env) != nil || env["error"] == nil {
				t.Errorf("not an error envelope: %s", w.Body.String())
			}
		})
	}
}

package server

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/routing"
)

// dialectServer is documentedServer (3-dimensional fake vectors, GGUF facts) with
// the embedder's error and the config given.
func dialectServer(e *fakeEmbedder, cfg Config) http.Handler {
	return documentedServer(e, true, cfg).Handler()
}

// durations hides the figures that change from run to run.
var durations = regexp.MustCompile(`"(total|load)_duration":\d+`)

// tagsWant is GET /api/tags' answer for documentedServer's model under these names.
func tagsWant(names ...string) string {
	var rows []string
	for _, n := range names {
		rows = append(rows, `{"name":"`+n+`","model":"`+n+`","modified_at":"2023-11-14T22:13:20Z","size":1048576,"digest":"`+strings.Repeat("ab", 32)+`","details":{"parent_model":"","format":"gguf","family":"qwen3","families":["qwen3"],"parameter_size":"595.78M","quantization_level":"F16"}}`)
	}
	return `{"models":[` + strings.Join(rows, ",") + `]}`
}

// Every Ollama route answers as Ollama v0.17.4 does: the body byte for byte
// (durations aside), the status, and what reaches routing.
func TestOllamaRoutes(t *testing.T) {
	contextLength := &routing.InputError{Param: "input", Index: 0, Code: routing.CodeContextLength, Message: "This model's maximum context length is 8 tokens...", Tokens: 9, Limit: 8}
	tests := []struct {
		name, method, path, body string
		cfg                      Config
		err                      error
		status                   int
		want                     string
		check                    func(t *testing.T, req *routing.Request)
	}{
		{name: "embed", method: "POST", path: "/api/embed", body: `{"model":"nomic-embed-text","input":["a","b"]}`, status: 200,
			want: `{"model":"nomic-embed-text","embeddings":[[0,0.5,-0.25],[1,0.5,-0.25]],"total_duration":D,"load_duration":D,"prompt_eval_count":14}`,
			check: func(t *testing.T, req *routing.Request) {
				if req.Truncate != routing.TruncateEnd || req.InputType != "" || req.Dimensions != 0 || req.Raw {
					t.Errorf("routing request %+v: want truncation at the end (Ollama's default), documents, native size, normalised", req)
				}
			}},
		{name: "one string", method: "POST", path: "/api/embed", body: `{"model":"m","input":"a","truncate":false,"dimensions":2,"keep_alive":"5m","options":{"num_ctx":512}}`, status: 200,
			want: `{"model":"m","embeddings":[[0,0.5,-0.25]],"total_duration":D,"load_duration":D,"prompt_eval_count":7}`,
			check: func(t *testing.T, req *routing.Request) {
				if req.Truncate != routing.NoTruncation || req.Dimensions != 2 || len(req.Texts) != 1 {
					t.Errorf("routing request %+v: want no truncation, dimensions 2", req)
				}
			}},
		{name: "dimensions Ollama cannot apply are ignored", method: "POST", path: "/api/embed", body: `{"model":"m","input":"a","dimensions":3}`, status: 200,
			want: `{"model":"m","embeddings":[[0,0.5,-0.25]],"total_duration":D,"load_duration":D,"prompt_eval_count":7}`,
			check: func(t *testing.T, req *routing.Request) {
				if req.Dimensions != 0 {
					t.Errorf("dimensions %d reached routing; Ollama ignores dimensions >= the model's", req.Dimensions)
				}
			}},
		{name: "query suffix", method: "POST", path: "/api/embed", body: `{"model":"qwen3-embedding-0.6b:query","input":"a"}`, cfg: Config{StrictModel: true}, status: 200,
			want: `{"model":"qwen3-embedding-0.6b:query","embeddings":[[0,0.5,-0.25]],"total_duration":D,"load_duration":D,"prompt_eval_count":7}`,
			check: func(t *testing.T, req *routing.Request) {
				if req.InputType != "query" {
					t.Errorf("input type %q, want query", req.InputType)
				}
			}},
		{name: "latest tag", method: "POST", path: "/api/embed", body: `{"model":"alias:latest","input":[]}`, cfg: Config{StrictModel: true}, status: 200,
			want: `{"model":"alias:latest","embeddings":[]}`},
		{name: "empty input loads", method: "POST", path: "/api/embed", body: `{"model":"m","input":""}`, status: 200, want: `{"model":"m","embeddings":[]}`},
		{name: "no input", method: "POST", path: "/api/embed", body: `{"model":"m"}`, status: 200, want: `{"model":"m","embeddings":[]}`},
		{name: "no body", method: "POST", path: "/api/embed", body: ``, status: 400, want: `{"error":"missing request body"}`},
		{name: "not JSON", method: "POST", path: "/api/embed", body: `{"model":`, status: 400, want: `{"error":"unexpected EOF"}`},
		{name: "wrong type", method: "POST", path: "/api/embed", body: `{"model":1,"input":"a"}`, status: 400,
			want: `{"error":"json: cannot unmarshal number into Go struct field EmbedRequest.model of type string"}`},
		{name: "input of numbers", method: "POST", path: "/api/embed", body: `{"model":"m","input":[1,2]}`, status: 400, want: `{"error":"invalid input type"}`},
		{name: "input object", method: "POST", path: "/api/embed", body: `{"model":"m","input":{"a":1}}`, status: 400, want: `{"error":"invalid input type"}`},
		{name: "bad keep_alive", method: "POST", path: "/api/embed", body: `{"model":"m","input":"a","keep_alive":"soon"}`, status: 400, want: `{"error":"time: invalid duration \"soon\""}`},
		{name: "no model", method: "POST", path: "/api/embed", body: `{"input":"a"}`, status: 400, want: `{"error":"model is required"}`},
		{name: "unknown model", method: "POST", path: "/api/embed", body: `{"model":"nomic-embed-text","input":"a"}`, cfg: Config{StrictModel: true}, status: 404,
			want: `{"error":"model 'nomic-embed-text' not found"}`},
		{name: "over the context", method: "POST", path: "/api/embed", body: `{"model":"m","input":"a","truncate":false}`, err: contextLength, status: 400,
			want: `{"error":"the input length exceeds the context length"}`},
		{name: "busy", method: "POST", path: "/api/embed", body: `{"model":"m","input":"a"}`, err: &routing.BusyError{RetryAfter: 2 * time.Second}, status: 503},
		{name: "not ready", method: "POST", path: "/api/embed", body: `{"model":"m","input":"a"}`, err: routing.ErrUnavailable, status: 503,
			want: `{"error":"The embedding worker is not ready (starting or restarting); retry after 1s."}`},
		{name: "engine failure", method: "POST", path: "/api/embed", body: `{"model":"m","input":"a"}`, err: errors.New("boom"), status: 500,
			want: `{"error":"The server had an error while processing your request; the server log has the cause."}`},
		{name: "too large", method: "POST", path: "/api/embed", body: `{"model":"m","input":"` + strings.Repeat("a", 100) + `"}`, cfg: Config{MaxBodyBytes: 64}, status: 413,
			want: `{"error":"The request body is larger than the server's limit of 64 bytes (--max-body-bytes)."}`},
		{name: "key", method: "POST", path: "/api/embed", body: `{"model":"m","input":"a"}`, cfg: Config{APIKeys: []string{"k"}}, status: 401},

		{name: "legacy", method: "POST", path: "/api/embeddings", body: `{"model":"m","prompt":"a"}`, status: 200, want: `{"embedding":[0,0.5,-0.25]}`,
			check: func(t *testing.T, req *routing.Request) {
				if req.Truncate != routing.NoTruncation || req.InputField != "prompt" {
					t.Errorf("routing request %+v: the legacy route does not truncate", req)
				}
			}},
		{name: "legacy empty prompt", method: "POST", path: "/api/embeddings", body: `{"model":"m","prompt":""}`, status: 200, want: `{"embedding":[]}`},
		{name: "legacy no model", method: "POST", path: "/api/embeddings", body: `{"prompt":"a"}`, status: 400, want: `{"error":"model is required"}`},
		{name: "legacy unknown model", method: "POST", path: "/api/embeddings", body: `{"model":"x","prompt":"a"}`, cfg: Config{StrictModel: true}, status: 404,
			want: `{"error":"model \"x\" not found, try pulling it first"}`},

		{name: "tags", method: "GET", path: "/api/tags", status: 200, want: tagsWant("qwen3-embedding-0.6b:latest", "qwen3-embedding-0.6b:query", "qwen3-embedding-0.6b:document", "alias:latest", "alias:query", "alias:document")},
		{name: "root", method: "GET", path: "/", status: 200, want: `Ollama is running`},
		{name: "root with a key", method: "HEAD", path: "/", cfg: Config{APIKeys: []string{"k"}}, status: 200},
		{name: "version", method: "GET", path: "/api/version", status: 200, want: `{"version":"0.17.4"}`},
		{name: "show", method: "POST", path: "/api/show", body: `{"model":"qwen3-embedding-0.6b:latest"}`, cfg: Config{StrictModel: true}, status: 200,
			want: `{"details":{"parent_model":"","format":"gguf","family":"qwen3","families":["qwen3"],"parameter_size":"595.78M","quantization_level":"F16"},"model_info":{"general.architecture":"qwen3","general.parameter_count":595776512,"qwen3.context_length":32768,"qwen3.embedding_length":3,"qwen3.pooling_type":3},"capabilities":["embedding"],"modified_at":"2023-11-14T22:13:20Z"}`},
		{name: "show by name", method: "POST", path: "/api/show", body: `{"name":"alias"}`, cfg: Config{StrictModel: true}, status: 200},
		{name: "show no model", method: "POST", path: "/api/show", body: `{}`, status: 400, want: `{"error":"model is required"}`},
		{name: "show unknown", method: "POST", path: "/api/show", body: `{"model":"llama3"}`, cfg: Config{StrictModel: true}, status: 404, want: `{"error":"model 'llama3' not found"}`},
		{name: "unknown route", method: "POST", path: "/api/generate", body: `{}`, status: 404, want: `{"error":"Unknown request URL: POST /api/generate."}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &fakeEmbedder{err: tc.err}
			w := do(dialectServer(e, tc.cfg), tc.method, tc.path, tc.body, nil)
			got := durations.ReplaceAllString(w.Body.String(), `"${1}_duration":D`)
			if w.Code != tc.status || tc.want != "" && got != tc.want {
				t.Fatalf("status %d, body %s\nwant %d, %s", w.Code, w.Body, tc.status, tc.want)
			}
			if w.Code >= 400 && !regexp.MustCompile(`^\{"error":"[^"\\]*(\\.[^"\\]*)*"\}$`).MatchString(w.Body.String()) {
				t.Errorf("error body %s is not Ollama's {\"error\": string}", w.Body)
			}
			if tc.status == 503 && w.Header().Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			if tc.check != nil {
				if e.last == nil {
					t.Fatal("nothing reached routing")
				}
				tc.check(t, e.last)
			}
		})
	}
}

// POST /embed with "inputs", and POST /, answer as text-embeddings-inference does;
// POST /embed with "texts" stays the native API.
func TestTEIRoutes(t *testing.T) {
	tests := []struct {
		name, path, body string
		cfg              Config
		err              error
		status           int
		want             string
		check            func(t *testing.T, req *routing.Request)
	}{
		{name: "one string", path: "/embed", body: `{"inputs":"a"}`, status: 200, want: `[[0,0.5,-0.25]]`,
			check: func(t *testing.T, req *routing.Request) {
				if req.Raw || req.Truncate != routing.NoTruncation || req.InputType != "" || req.InputField != "inputs" {
					t.Errorf("routing request %+v: want normalised, no truncation (TEI's default), documents", req)
				}
			}},
		{name: "root", path: "/", body: `{"inputs":["a","b"]}`, status: 200, want: `[[0,0.5,-0.25],[1,0.5,-0.25]]`},
		{name: "options", path: "/embed", body: `{"inputs":["a"],"normalize":false,"prompt_name":"query","truncate":true,"truncation_direction":"Left","dimensions":2,"unknown":1}`, status: 200,
			check: func(t *testing.T, req *routing.Request) {
				if !req.Raw || req.Truncate != routing.TruncateStart || req.InputType != "query" || req.Dimensions != 2 {
					t.Errorf("routing request %+v", req)
				}
			}},
		{name: "truncate right", path: "/embed", body: `{"inputs":["a"],"truncate":true}`, status: 200,
			check: func(t *testing.T, req *routing.Request) {
				if req.Truncate != routing.TruncateEnd {
					t.Errorf("truncation %v, want the end dropped", req.Truncate)
				}
			}},
		{name: "model", path: "/embed", body: `{"inputs":"a","model":"alias:query"}`, cfg: Config{StrictModel: true}, status: 200, want: `[[0,0.5,-0.25]]`,
			check: func(t *testing.T, req *routing.Request) {
				if req.InputType != "query" {
					t.Errorf("input type %q, want the model suffix's query", req.InputType)
				}
			}},
		{name: "unknown model", path: "/", body: `{"inputs":"a","model":"other"}`, cfg: Config{StrictModel: true}, status: 404,
			want: "{\"error\":\"The model `other` does not exist or you do not have access to it.\",\"error_type\":\"Validation\"}"},
		{name: "model not a string", path: "/embed", body: `{"inputs":"a","model":1}`, status: 422,
			want: "{\"error\":\"Failed to deserialize the JSON body into the target type: model: invalid type: integer `1`, expected a string\",\"error_type\":\"Validation\"}"},
		{name: "a key twice", path: "/embed", body: `{"inputs":"a","inputs":"b"}`, status: 422,
			want: "{\"error\":\"Failed to deserialize the JSON body into the target type: duplicate field `inputs`\",\"error_type\":\"Validation\"}"},
		{name: "an option twice", path: "/", body: `{"inputs":"a","normalize":true,"normalize":false}`, status: 422,
			want: "{\"error\":\"Failed to deserialize the JSON body into the target type: duplicate field `normalize`\",\"error_type\":\"Validation\"}"},
		{name: "native texts", path: "/embed", body: `{"texts":["a"]}`, status: 200, want: `{"vectors":[[0,0.5,-0.25]]}`},
		{name: "both shapes", path: "/embed", body: `{"inputs":["a"],"texts":["a"]}`, status: 422,
			want: `{"error":"Input validation error: send ` + "`inputs`" + ` (text-embeddings-inference's shape) or ` + "`texts`" + ` (the native one), not both","error_type":"Validation"}`},
		{name: "empty batch", path: "/embed", body: `{"inputs":[]}`, status: 400, want: "{\"error\":\"`inputs` cannot be empty\",\"error_type\":\"Empty\"}"},
		{name: "empty text", path: "/", body: `{"inputs":""}`, err: &routing.InputError{Code: routing.CodeEmptyInput, Message: "inputs[0] is an empty string"}, status: 400,
			want: "{\"error\":\"Input validation error: `inputs` cannot be empty\",\"error_type\":\"Empty\"}"},
		{name: "too long", path: "/embed", body: `{"inputs":"a"}`, err: &routing.InputError{Code: routing.CodeContextLength, Message: "long", Tokens: 600, Limit: 512}, status: 422,
			want: "{\"error\":\"Input validation error: `inputs` must have less than 512 tokens. Given: 600\",\"error_type\":\"Validation\"}"},
		{name: "too many", path: "/embed", body: `{"inputs":"a"}`, err: &routing.InputError{Code: routing.CodeTooManyInputs, Message: "many", Tokens: 3000, Limit: 2048}, status: 422,
			want: `{"error":"batch size 3000 > maximum allowed batch size 2048","error_type":"Validation"}`},
		{name: "other validation", path: "/embed", body: `{"inputs":"a"}`, err: &routing.InputError{Code: routing.CodeInvalidValue, Message: "'dimensions' must be between 32 and 1024 for this model; got 8."}, status: 422,
			want: `{"error":"Input validation error: 'dimensions' must be between 32 and 1024 for this model; got 8.","error_type":"Validation"}`},
		{name: "dimensions 0", path: "/embed", body: `{"inputs":"a","dimensions":0}`, status: 422,
			want: "{\"error\":\"Input validation error: `dimensions` should be positive\",\"error_type\":\"Validation\"}"},
		{name: "dimensions too large", path: "/embed", body: `{"inputs":"a","dimensions":4}`, status: 422,
			want: "{\"error\":\"Input validation error: `dimensions` should be smaller than the maximum embedding dimension.\",\"error_type\":\"Validation\"}"},
		{name: "unknown prompt", path: "/embed", body: `{"inputs":"a","prompt_name":"search"}`, status: 422,
			want: "{\"error\":\"Input validation error: `default-prompt-name` is set to `search` but it was not found in the Sentence Transformers prompts. Available prompts: [\\\"query\\\", \\\"document\\\"]\",\"error_type\":\"Validation\"}"},
		{name: "inputs of another type", path: "/embed", body: `{"inputs":{"a":1}}`, status: 422,
			want: `{"error":"Failed to deserialize the JSON body into the target type: inputs: data did not match any variant of untagged enum Input","error_type":"Validation"}`},
		{name: "token ids", path: "/embed", body: `{"inputs":[[1,2]]}`, status: 422,
			want: "{\"error\":\"Input validation error: `inputs` as token ids is not supported by this server; send text\",\"error_type\":\"Validation\"}"},
		{name: "bad direction", path: "/embed", body: `{"inputs":"a","truncation_direction":"middle"}`, status: 422,
			want: "{\"error\":\"Failed to deserialize the JSON body into the target type: truncation_direction: unknown variant `middle`, expected `Left` or `Right`\",\"error_type\":\"Validation\"}"},
		{name: "normalize null", path: "/embed", body: `{"inputs":"a","normalize":null}`, status: 422,
			want: `{"error":"Failed to deserialize the JSON body into the target type: normalize: invalid type: null, expected a boolean","error_type":"Validation"}`},
		{name: "no inputs at root", path: "/", body: `{"texts":["a"]}`, status: 422,
			want: "{\"error\":\"Failed to deserialize the JSON body into the target type: missing field `inputs`\",\"error_type\":\"Validation\"}"},
		{name: "not JSON", path: "/", body: `{"inputs":`, status: 400,
			want: `{"error":"Failed to parse the request body as JSON: unexpected end of JSON input","error_type":"Validation"}`},
		{name: "overloaded", path: "/embed", body: `{"inputs":"a"}`, err: &routing.BusyError{RetryAfter: time.Second}, status: 429,
			want: `{"error":"Model is overloaded","error_type":"Overloaded"}`},
		{name: "unhealthy", path: "/embed", body: `{"inputs":"a"}`, err: routing.ErrUnavailable, status: 503,
			want: `{"error":"The embedding worker is not ready (starting or restarting); retry after 1s.","error_type":"Unhealthy"}`},
		{name: "backend", path: "/", body: `{"inputs":"a"}`, err: errors.New("engine"), status: 424,
			want: `{"error":"The server had an error while processing your request; the server log has the cause.","error_type":"Backend"}`},
		// Per-token embeddings are not computed: TEI's answer for what a model
		// cannot do, whatever the body.
		{name: "embed_all", path: "/embed_all", body: `{"inputs":"a"}`, status: 424,
			want: "{\"error\":\"`embed_all` is not available: embed-stack computes the pooled vector of each input, not every token's; use /embed\",\"error_type\":\"Backend\"}"},
		{name: "embed_all, no body", path: "/embed_all", status: 424,
			want: "{\"error\":\"`embed_all` is not available: embed-stack computes the pooled vector of each input, not every token's; use /embed\",\"error_type\":\"Backend\"}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &fakeEmbedder{err: tc.err}
			w := do(dialectServer(e, tc.cfg), "POST", tc.path, tc.body, nil)
			if w.Code != tc.status || tc.want != "" && w.Body.String() != tc.want {
				t.Fatalf("status %d, body %s\nwant %d, %s", w.Code, w.Body, tc.status, tc.want)
			}
			if tc.check != nil {
				if e.last == nil {
					t.Fatal("nothing reached routing")
				}
				tc.check(t, e.last)
			}
		})
	}
}

// GET /info carries TEI's keys for the embedding model beside its own.
func TestInfoHasTEIKeys(t *testing.T) {
	w := do(dialectServer(&fakeEmbedder{}, Config{}), "GET", "/info", "", nil)
	for _, want := range []string{`"model_id":"qwen3-embedding-0.6b"`, `"model_sha":"` + strings.Repeat("ab", 32) + `"`, `"model_dtype":"float16"`,
		`"model_type":{"embedding":{"pooling":"last_token"}}`, `"max_input_length":32768`, `"max_client_batch_size":2048`, `"auto_truncate":false`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("/info lacks %s: %s", want, w.Body)
		}
	}
}

// /api/show's pooling_type is the model's, as llama.cpp numbers it in a GGUF.
func TestOllamaPooling(t *testing.T) {
	for _, tc := range []struct {
		info ModelInfo
		want gguf.Pooling
		ok   bool
	}{
		{ModelInfo{Task: "embedding", Pooling: "last"}, gguf.PoolingLast, true},
		{ModelInfo{Task: "embedding", Pooling: "mean"}, gguf.PoolingMean, true},
		{ModelInfo{Task: "embedding", Pooling: "cls"}, gguf.PoolingCLS, true},
		{ModelInfo{Task: "rerank"}, gguf.PoolingRank, true},
		{ModelInfo{Task: "embedding"}, 0, false},
	} {
		if got, ok := ollamaPooling(&tc.info); ok != tc.ok || ok && got != tc.want {
			t.Errorf("%+v: pooling %d %t, want %d %t", tc.info, got, ok, tc.want, tc.ok)
		}
	}
}

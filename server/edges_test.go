package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestModelSuffix: the suffix is read as input_type is (case-insensitive, passage =
// document); an unknown suffix on a served model is refused naming the valid ones;
// on other names a colon is part of the label.
func TestModelSuffix(t *testing.T) {
	const bad = "{\"error\":{\"message\":\"The model suffix `:%s` is not an input type; use `%[2]s:query`, `%[2]s:document` or `%[2]s:passage` (case-insensitive), or send input_type.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"invalid_value\"}}"
	tests := []struct {
		model    string
		strict   bool
		wantType string // the input type handed to routing; "!" when refused
		wantBody string
	}{
		{model: "m:Query", wantType: "Query"},
		{model: "m:QUERY", wantType: "QUERY"},
		{model: "qwen3-embedding-0.6b:Document", wantType: "Document"},
		{model: "alias:passage", wantType: "passage"},
		{model: "qwen3-embedding-0.6b:search", wantType: "!", wantBody: fmt.Sprintf(bad, "search", "qwen3-embedding-0.6b")},
		{model: "alias:querry", strict: true, wantType: "!", wantBody: "{\"error\":{\"message\":\"The model suffix `:querry` is not an input type; use `alias:query`, `alias:document` or `alias:passage` (case-insensitive), or send input_type.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"invalid_value\"}}"},
		{model: "qwen3-embedding-0.6b:", wantType: "!", wantBody: "{\"error\":{\"message\":\"The model suffix `:` is not an input type; use `qwen3-embedding-0.6b:query`, `qwen3-embedding-0.6b:document` or `qwen3-embedding-0.6b:passage` (case-insensitive), or send input_type.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"invalid_value\"}}"},
		{model: "nomic-embed-text:latest", wantType: ""}, // not served here: a label
		{model: "tagged:v2", wantType: ""},               // an alias with a colon is a name, not a suffix
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			e := &fakeEmbedder{}
			h := newTestServer(Config{StrictModel: tt.strict, Aliases: []string{"alias", "tagged:v2"}}, e, true)
			w := do(h, "POST", "/v1/embeddings", `{"model":"`+tt.model+`","input":"a"}`, nil)
			if tt.wantType == "!" {
				if w.Code != 400 || w.Body.String() != tt.wantBody {
					t.Fatalf("got %d %s\nwant 400 %s", w.Code, w.Body, tt.wantBody)
				}
				if e.last != nil {
					t.Fatalf("a refused request reached routing: %+v", e.last)
				}
				return
			}
			if w.Code != 200 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if e.last.InputType != tt.wantType {
				t.Fatalf("input type %q, want %q", e.last.InputType, tt.wantType)
			}
			var resp struct{ Model string }
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.Model != tt.model {
				t.Fatalf("model echoed as %q (%v), want %q", resp.Model, err, tt.model)
			}
		})
	}
}

// TestMethodNotAllowed: a known URL with another method is 405 with Allow and the
// envelope, on every route.
func TestMethodNotAllowed(t *testing.T) {
	h := newTestServer(Config{}, &fakeEmbedder{}, true)
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/v1/embeddings", "POST"},
		{"PUT", "/v1/embeddings", "POST"},
		{"GET", "/embed", "POST"},
		{"GET", "/tokenize", "POST"},
		{"POST", "/health", "GET, HEAD"},
		{"DELETE", "/v1/models", "GET"},
	} {
		w := do(h, c.method, c.path, "", nil)
		want := `{"error":{"message":"` + c.method + ` is not allowed on ` + c.path + `; use ` + c.allow + `.","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}`
		if w.Code != http.StatusMethodNotAllowed || w.Body.String() != want || w.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: got %d Allow=%q %s\nwant 405 Allow=%q %s", c.method, c.path, w.Code, w.Header().Get("Allow"), w.Body, c.allow, want)
		}
	}
}

// TestInvalidUTF8 refuses bodies that are not UTF-8, naming the input, on every
// endpoint; a lone surrogate escape is valid JSON and passes.
func TestInvalidUTF8(t *testing.T) {
	const advice = "a JSON body must be UTF-8 (RFC 8259); decode the text from its real encoding before sending it."
	envelope := func(msg, param string) string {
		p := "null"
		if param != "" {
			p = `"` + param + `"`
		}
		return `{"error":{"message":"` + msg + advice + `","type":"invalid_request_error","param":` + p + `,"code":null}}`
	}
	tests := []struct {
		name, path, body, want string
	}{
		{"one string", "/v1/embeddings", "{\"input\":\"caf\xe9\"}", envelope("input 0 is not valid UTF-8 (byte 0xE9); ", "input")},
		{"third of three", "/v1/embeddings", "{\"input\":[\"a\",\"b\",\"\xff\xfe\"]}", envelope("input 2 is not valid UTF-8 (byte 0xFF); ", "input")},
		{"in the model", "/v1/embeddings", "{\"input\":\"a\",\"model\":\"m\xc3\"}", envelope("'model' is not valid UTF-8 (byte 0xC3); ", "")},
		{"in an unknown field", "/v1/embeddings", "{\"input\":\"a\",\"x\":\"\xc0\"}", envelope("'x' is not valid UTF-8 (byte 0xC0); ", "")},
		{"embed texts", "/embed", "{\"texts\":[\"ok\",\"caf\xe9\"]}", envelope("texts[1] is not valid UTF-8 (byte 0xE9); ", "texts")},
		{"tokenize text", "/tokenize", "{\"text\":\"caf\xe9\"}", envelope("'text' is not valid UTF-8 (byte 0xE9); ", "")},
		{"rerank document", "/v1/rerank", "{\"query\":\"q\",\"documents\":[\"ok\",\"caf\xe9\"]}", envelope("document 1 is not valid UTF-8 (byte 0xE9); ", "documents")},
		{"rerank document object", "/v1/rerank", "{\"query\":\"q\",\"documents\":[{\"text\":\"\xff\"}]}", envelope("document 0 is not valid UTF-8 (byte 0xFF); ", "documents")},
		{"rerank query", "/v1/rerank", "{\"query\":\"caf\xe9\",\"documents\":[\"ok\"]}", envelope("'query' is not valid UTF-8 (byte 0xE9); ", "")},
		{"v2 rerank document", "/v2/rerank", "{\"query\":\"q\",\"documents\":[\"caf\xe9\"]}", envelope("document 0 is not valid UTF-8 (byte 0xE9); ", "documents")},
		{"tei rerank text", "/rerank", "{\"query\":\"q\",\"texts\":[\"ok\",\"ok\",\"\xc3\"]}", envelope("texts[2] is not valid UTF-8 (byte 0xC3); ", "texts")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &fakeEmbedder{}
			w := do(newTestServer(Config{}, e, true), "POST", tt.path, tt.body, nil)
			if w.Code != 400 || w.Body.String() != tt.want {
				t.Fatalf("got %d %s\nwant 400 %s", w.Code, w.Body, tt.want)
			}
			if e.last != nil {
				t.Fatalf("the request reached routing: %+v", e.last)
			}
		})
	}
	e := &fakeEmbedder{}
	if w := do(newTestServer(Config{}, e, true), "POST", "/v1/embeddings", `{"input":"x\ud800y"}`, nil); w.Code != 200 || e.last.Texts[0] != "x\uFFFDy" {
		t.Fatalf("lone surrogate: %d %s, texts %q", w.Code, w.Body, e.last.Texts)
	}
}

// TestNativeFields: /embed names its field texts (routing gets InputField "texts"),
// refuses "text", and /tokenize takes text or texts but not both.
func TestNativeFields(t *testing.T) {
	e := &fakeEmbedder{}
	h := newTestServer(Config{}, e, true)
	if w := do(h, "POST", "/embed", `{"texts":["a"]}`, nil); w.Code != 200 || e.last.InputField != "texts" {
		t.Fatalf("/embed: %d %s, InputField %q", w.Code, w.Body, e.last.InputField)
	}
	if w := do(h, "POST", "/tokenize", `{"text":"a"}`, nil); w.Code != 200 || e.last.InputField != "text" {
		t.Fatalf("/tokenize text: %d %s, InputField %q", w.Code, w.Body, e.last.InputField)
	}
	if w := do(h, "POST", "/tokenize", `{"texts":["a","b"]}`, nil); w.Code != 200 || e.last.InputField != "texts" || len(e.last.Texts) != 2 {
		t.Fatalf("/tokenize texts: %d %s, %+v", w.Code, w.Body, e.last)
	}
	for _, c := range []struct{ path, body, want string }{
		{"/embed", `{"text":"a"}`, `{"error":{"message":"POST /embed takes 'texts', an array of strings; 'text' is a field of POST /tokenize only.","type":"invalid_request_error","param":"text","code":null}}`},
		{"/embed", `{"text":"a","texts":["b"]}`, `{"error":{"message":"POST /embed takes 'texts', an array of strings; 'text' is a field of POST /tokenize only.","type":"invalid_request_error","param":"text","code":null}}`},
		{"/tokenize", `{"text":"a","texts":["b"]}`, `{"error":{"message":"Send 'text' (one string) or 'texts' (an array of strings), not both.","type":"invalid_request_error","param":"text","code":null}}`},
	} {
		if w := do(h, "POST", c.path, c.body, nil); w.Code != 400 || w.Body.String() != c.want {
			t.Errorf("%s %s: got %d %s\nwant 400 %s", c.path, c.body, w.Code, w.Body, c.want)
		}
	}
}

// TestRequestLogLines: probes and scrapes are logged at DEBUG unless they fail with
// a 5xx; an unknown URL is logged with route "unmatched", as it is counted; an error
// carries its envelope code.
func TestRequestLogLines(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{
		Config:   Config{ModelName: "m", Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		Embedder: &fakeEmbedder{},
		Ready:    func() bool { return true },
		Metrics:  http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("# nothing\n")) }),
	}
	h := s.Handler()
	type line struct {
		Level, Path, Route, Error_code string
		Status                         int
	}
	for _, c := range []struct {
		method, path, body string
		want               line
	}{
		{"GET", "/health", "", line{Level: "DEBUG", Path: "/health", Route: "/health", Status: 200}},
		{"GET", "/ready", "", line{Level: "DEBUG", Path: "/ready", Route: "/ready", Status: 200}},
		{"GET", "/metrics", "", line{Level: "DEBUG", Path: "/metrics", Route: "/metrics", Status: 200}},
		{"POST", "/v1/embeddings", `{"input":"a"}`, line{Level: "INFO", Path: "/v1/embeddings", Route: "/v1/embeddings", Status: 200}},
		{"GET", "/nowhere", "", line{Level: "INFO", Path: "/nowhere", Route: "unmatched", Status: 404, Error_code: "not_found"}},
		{"POST", "/v1/embeddings", `{"input":[]}`, line{Level: "INFO", Path: "/v1/embeddings", Route: "/v1/embeddings", Status: 400, Error_code: "none"}},
	} {
		buf.Reset()
		do(h, c.method, c.path, c.body, nil)
		var got line
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%s %s: log %q: %v", c.method, c.path, buf.String(), err)
		}
		if got != c.want {
			t.Errorf("%s %s: logged %+v, want %+v", c.method, c.path, got, c.want)
		}
	}
	s.Ready = func() bool { return false }
	buf.Reset()
	do(h, "GET", "/ready", "", nil)
	if !strings.Contains(buf.String(), `"level":"DEBUG"`) || !strings.Contains(buf.String(), `"status":503`) {
		t.Errorf("/ready 503 logged as %s, want DEBUG", buf.String())
	}
}

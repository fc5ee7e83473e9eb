package conformance

import (
	"fmt"
	"net/http"
	"testing"
)

// TestNeverAdmittableIs400: a request with more inputs over the warm limit than the
// ephemeral admission ever holds (workers running plus places in the queue) is a 400
// naming the limit, on /v1/embeddings and on the rerank routes: no retry could get it
// admitted, and a client that retries 429s would loop forever (issue 28: 429 with
// Retry-After: 45 at every try). One fewer such input is embedded, so the limit is
// exactly the one named.
func TestNeverAdmittableIs400(t *testing.T) {
	flags := []string{"--warm-max-tokens", "128", "--max-input-tokens", "512", "--max-ephemeral", "1", "--ephemeral-queue", "1", "--threads", "1"}
	long := repeatedText(t, 150)
	const msg = `{"error":{"message":"The request holds 3 inputs over 128 tokens (the first is %s); each takes an ephemeral worker of its own, and this server holds at most 2 such inputs at once (1 running, --max-ephemeral, and 1 waiting, --ephemeral-queue). Split the request into parts of at most 2 such inputs.","type":"invalid_request_error","param":"%s","code":"too_many_long_inputs"}}`

	s := serverWith(t, flags...)
	r := s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": []string{"short", long, long, long}}, nil)
	requireExactError(t, r, http.StatusBadRequest, fmt.Sprintf(msg, "input 1", "input"))
	r = s.do(t, http.MethodPost, "/embed", map[string]any{"texts": []string{long, long, long}}, nil)
	requireExactError(t, r, http.StatusBadRequest, fmt.Sprintf(msg, "texts[0]", "texts"))
	r = s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": []string{long, "short", long}}, nil)
	if r.status != http.StatusOK {
		t.Errorf("two long inputs: %d %s, want 200", r.status, truncate(r.body))
	}

	rs := rerankServer(t, flags...)
	r = rs.do(t, http.MethodPost, "/v1/rerank", map[string]any{"query": "q", "documents": []string{long, long, long}}, nil)
	requireExactError(t, r, http.StatusBadRequest, fmt.Sprintf(msg, "document 0", "documents"))
	r = rs.do(t, http.MethodPost, "/rerank", map[string]any{"query": "q", "texts": []string{"a", long, long, long}}, nil)
	requireExactError(t, r, http.StatusBadRequest, fmt.Sprintf(msg, "texts[1]", "texts"))
	r = rs.do(t, http.MethodPost, "/v1/rerank", map[string]any{"query": "q", "documents": []string{long, long}}, nil)
	if r.status != http.StatusOK {
		t.Errorf("two long documents: %d %s, want 200", r.status, truncate(r.body))
	}
}

// TestRerankNullDocuments: a null document is refused with 400, as a null input of
// /v1/embeddings and a document {"text":null} are (issue 28: documents:[null] and TEI
// texts:[null] were scored as ""). TEI's /rerank names its own field, texts, in
// every refusal (issue 28: texts:[] named documents).
func TestRerankNullDocuments(t *testing.T) {
	s := rerankServer(t)
	const envelope = `{"error":{"message":%q,"type":"invalid_request_error","param":%q,"code":%s}}`
	for _, tt := range []struct {
		path, body, msg, param, code string
	}{
		{"/v1/rerank", `{"query":"q","documents":["a",null]}`, "document 1 is null; each document is a string or an object with a string 'text'", "documents", "null"},
		{"/v2/rerank", `{"query":"q","documents":[null]}`, "document 0 is null; each document is a string or an object with a string 'text'", "documents", "null"},
		{"/v1/rerank", `{"query":"q","documents":[{"text":null}]}`, `document 0 is {"text":null}; each document is a string or an object with a string 'text'`, "documents", "null"},
		{"/rerank", `{"query":"q","texts":["a",null]}`, "texts[1] is null; each text is a string", "texts", "null"},
		{"/rerank", `{"query":"q","texts":[1]}`, "texts[0] is 1; each text is a string", "texts", "null"},
		{"/rerank", `{"query":"q","texts":[]}`, "'texts' must not be empty.", "texts", `"empty_input"`},
	} {
		r := s.do(t, http.MethodPost, tt.path, []byte(tt.body), nil)
		requireExactError(t, r, http.StatusBadRequest, fmt.Sprintf(envelope, tt.msg, tt.param, tt.code))
	}
}

// TestOutputTypeOneRule: encoding_format, output_dtype and embedding_types follow one
// rule: a field that names a type (float included) names it, and two fields naming
// different types are a 400 naming both, whichever way round (issue 28: float with
// int8 gave 200 int8, int8 with float a 400).
func TestOutputTypeOneRule(t *testing.T) {
	s := defaultServer(t)
	const envelope = `{"error":{"message":%q,"type":"invalid_request_error","param":%q,"code":null}}`
	for _, tt := range []struct{ body, msg, param string }{
		{`{"input":"a","encoding_format":"float","output_dtype":"int8"}`, `'encoding_format' asks for "float" but 'output_dtype' for "int8"; name one output type.`, "output_dtype"},
		{`{"input":"a","encoding_format":"int8","output_dtype":"float"}`, `'encoding_format' asks for "int8" but 'output_dtype' for "float"; name one output type.`, "output_dtype"},
		{`{"input":"a","encoding_format":"float","embedding_types":["binary"]}`, `'encoding_format' asks for "float" but 'embedding_types' for "binary"; name one output type.`, "embedding_types"},
	} {
		r := s.do(t, http.MethodPost, "/v1/embeddings", []byte(tt.body), nil)
		requireExactError(t, r, http.StatusBadRequest, fmt.Sprintf(envelope, tt.msg, tt.param))
	}
	r := s.do(t, http.MethodPost, "/v1/embeddings", []byte(`{"input":"a","encoding_format":"float","output_dtype":"float"}`), nil)
	if r.status != http.StatusOK {
		t.Errorf("float twice: %d %s", r.status, truncate(r.body))
	}
}

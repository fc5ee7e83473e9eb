package conformance

import (
	"net/http"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

const (
	headerInputType   = "X-Embedding-Input-Type"
	headerInstruction = "X-Embedding-Instruction"
)

// TestReferenceDiscriminates guards the wrapping tests: if the reference gave nearly the
// same vector for a query and a document, a server that ignored the input type would
// still pass them.
func TestReferenceDiscriminates(t *testing.T) {
	loadReference(t)
	const text = "what is the capital of France"
	doc := expectDocument(t, text)
	query := expectQuery(t, defaultTask, text)
	custom := expectQuery(t, "Retrieve a similar question", text)
	for _, pair := range []struct {
		name string
		a, b expectation
	}{{"query/document", query, doc}, {"custom/default task", custom, query}, {"custom/document", custom, doc}} {
		if c := cosine(pair.a.vec, pair.b.vec); c > 0.999 {
			t.Errorf("%s: reference cosine %.6f; the wrappings must differ by more than the tolerance", pair.name, c)
		}
	}
}

// TestInputTypeAndInstruction: query/document and the instruction are chosen by body
// fields, headers, a model-name suffix and the server default, with precedence
// body > header > model suffix > default; an instruction with no input type makes a
// query. Each case must give exactly the reference vector
// and usage of the wrapping it selects.
func TestInputTypeAndInstruction(t *testing.T) {
	const text = "how do llamas sleep"
	const bodyTask = "Given a question, retrieve answers from a forum"
	const headerTask = "Given a product name, find its manual"
	id := defaultServer(t).modelID(t)

	type want struct {
		query bool
		task  string // for queries
	}
	doc := want{}
	query := want{query: true, task: defaultTask}
	tests := []struct {
		name    string
		flags   []string // server flags; nil is the default server
		model   string
		body    map[string]any
		headers map[string]string
		want    want
	}{
		{name: "default is document", model: "m", want: doc},
		{name: "body query", model: "m", body: map[string]any{"input_type": "query"}, want: query},
		{name: "body document", model: "m", body: map[string]any{"input_type": "document"}, want: doc},
		{name: "body passage is document", model: "m", body: map[string]any{"input_type": "passage"}, want: doc},
		{name: "body query with instruction", model: "m", body: map[string]any{"input_type": "query", "instruction": bodyTask}, want: want{true, bodyTask}},
		{name: "header query", model: "m", headers: map[string]string{headerInputType: "query"}, want: query},
		{name: "header passage", model: "m", headers: map[string]string{headerInputType: "passage"}, want: doc},
		{name: "header query with header instruction", model: "m", headers: map[string]string{headerInputType: "query", headerInstruction: headerTask}, want: want{true, headerTask}},
		{name: "model suffix query", model: id + ":query", want: query},
		{name: "any model name with suffix query", model: "qwen3-embedding-0.6b:query", want: query},
		{name: "model suffix document", model: id + ":document", want: doc},
		{name: "model suffix query with header instruction", model: id + ":query", headers: map[string]string{headerInstruction: headerTask}, want: want{true, headerTask}},
		{name: "model suffix query with body instruction", model: id + ":query", body: map[string]any{"instruction": bodyTask}, want: want{true, bodyTask}},
		{name: "body beats header", model: "m", body: map[string]any{"input_type": "document"}, headers: map[string]string{headerInputType: "query"}, want: doc},
		{name: "body query beats header document", model: "m", body: map[string]any{"input_type": "query"}, headers: map[string]string{headerInputType: "document"}, want: query},
		{name: "body instruction beats header instruction", model: "m", body: map[string]any{"input_type": "query", "instruction": bodyTask}, headers: map[string]string{headerInstruction: headerTask}, want: want{true, bodyTask}},
		{name: "header beats model suffix", model: id + ":query", headers: map[string]string{headerInputType: "document"}, want: doc},
		{name: "header query beats model suffix document", model: id + ":document", headers: map[string]string{headerInputType: "query"}, want: query},
		{name: "body beats model suffix", model: id + ":document", body: map[string]any{"input_type": "query"}, want: query},
		{name: "server default query", flags: []string{"--default-input-type", "query"}, model: "m", want: query},
		{name: "body beats server default", flags: []string{"--default-input-type", "query"}, model: "m", body: map[string]any{"input_type": "document"}, want: doc},
		{name: "header beats server default", flags: []string{"--default-input-type", "query"}, model: "m", headers: map[string]string{headerInputType: "document"}, want: doc},
		{name: "model suffix beats server default", flags: []string{"--default-input-type", "query"}, model: id + ":document", want: doc},
		// The suffix is case-insensitive, as input_type and the header are.
		{name: "model suffix Query", model: id + ":Query", want: query},
		{name: "any model name with suffix QUERY", model: "m:QUERY", want: query},
		{name: "model suffix Passage", flags: []string{"--default-input-type", "query"}, model: id + ":Passage", want: doc},
		{name: "body QUERY", model: "m", body: map[string]any{"input_type": "QUERY"}, want: query},
		// An instruction without an input type makes a query.
		{name: "body instruction alone is a query", model: "m", body: map[string]any{"instruction": bodyTask}, want: want{true, bodyTask}},
		{name: "header instruction alone is a query", model: "m", headers: map[string]string{headerInstruction: headerTask}, want: want{true, headerTask}},
		{name: "instruction with explicit document is ignored", model: "m", body: map[string]any{"input_type": "document", "instruction": bodyTask}, want: doc},
		{name: "instruction with suffix document is ignored", model: id + ":document", body: map[string]any{"instruction": bodyTask}, want: doc},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := serverWith(t, tc.flags...)
			var want expectation
			if tc.want.query {
				want = expectQuery(t, tc.want.task, text)
			} else {
				want = expectDocument(t, text)
			}
			for _, format := range []openai.EmbeddingEncodingFormat{openai.EmbeddingEncodingFormatFloat, openai.EmbeddingEncodingFormatBase64} {
				resp := embed(t, s.client(tc.headers), openai.EmbeddingRequestStrings{
					Input: []string{text}, Model: openai.EmbeddingModel(tc.model), ExtraBody: tc.body, EncodingFormat: format,
				})
				if len(resp.Data) != 1 {
					t.Fatalf("%s: %d vectors, want 1", format, len(resp.Data))
				}
				requireReference(t, string(format), f64(resp.Data[0].Embedding), want)
				if resp.Usage.PromptTokens != len(want.tokens) || resp.Usage.TotalTokens != len(want.tokens) {
					t.Errorf("%s: usage %d/%d, want %d for %q + EOS", format, resp.Usage.PromptTokens, resp.Usage.TotalTokens, len(want.tokens), want.wrapped)
				}
			}
		})
	}
}

// TestBadInputType: an input type that is neither query, document nor passage is a
// client error, whether it comes from the body or a header.
func TestBadInputType(t *testing.T) {
	s := defaultServer(t)
	tests := []struct {
		name    string
		body    map[string]any
		headers map[string]string
	}{
		{"body", map[string]any{"input": "x", "model": "m", "input_type": "questionnaire"}, nil},
		{"header", map[string]any{"input": "x", "model": "m"}, map[string]string{headerInputType: "questionnaire"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(t, http.MethodPost, "/v1/embeddings", tc.body, tc.headers)
			env := requireErrorEnvelope(t, r, http.StatusBadRequest)
			requireParam(t, env, "input_type")
		})
	}
}

package conformance

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// Error codes the server puts in error.code (OpenAI's own where one exists). A nil code
// in the tables below means JSON null.
const (
	codeContextLength     = "context_length_exceeded"
	codeTooManyInputs     = "too_many_inputs"
	codeTooManyTokens     = "too_many_tokens"
	codeEmptyInput        = "empty_input"
	codeInvalidTokenID    = "invalid_token_id"
	codeTokenIDsRefused   = "token_ids_not_supported"
	codeInvalidValue      = "invalid_value"
	codeInvalidDimensions = codeInvalidValue
	codeModelNotFound     = "model_not_found"
	codeNotFound          = "not_found"
)

func ptr(s string) *string { return &s }

// codeText names an expected code for messages; "" is JSON null.
func codeText(code string) string {
	if code == "" {
		return "null"
	}
	return fmt.Sprintf("%q", code)
}

// requireAPIError checks a go-openai *APIError: status, type, param and code ("" for
// JSON null).
func requireAPIError(t *testing.T, e *openai.APIError, status int, param, code string) {
	t.Helper()
	if e.HTTPStatusCode != status {
		t.Errorf("HTTPStatusCode %d, want %d (message %q)", e.HTTPStatusCode, status, e.Message)
	}
	wantType := "invalid_request_error"
	if status >= 500 {
		wantType = "server_error"
	}
	if e.Type != wantType {
		t.Errorf("Type %q, want %q", e.Type, wantType)
	}
	if e.Param == nil || *e.Param != param {
		t.Errorf("Param %s, want %q", strPtr(e.Param), param)
	}
	// go-openai decodes a JSON null code as the int 0 (it tries an int first).
	switch got := e.Code.(type) {
	case string:
		if got != code || code == "" {
			t.Errorf("Code %q, want %s", got, codeText(code))
		}
	case int:
		if got != 0 || code != "" {
			t.Errorf("Code %d, want %s", got, codeText(code))
		}
	default:
		if code != "" || got != nil {
			t.Errorf("Code %#v, want %s", e.Code, codeText(code))
		}
	}
	if e.Message == "" {
		t.Errorf("empty Message")
	}
}

func strPtr(p *string) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *p)
}

// requireParam checks error.param of an envelope.
func requireParam(t *testing.T, env errorEnvelope, param string) {
	t.Helper()
	if env.Error.Param == nil || *env.Error.Param != param {
		t.Errorf("error.param %s, want %q (message %q)", strPtr(env.Error.Param), param, env.Error.Message)
	}
}

// TestErrorsThroughGoOpenAI: the contract's client errors surface in go-openai as
// *openai.APIError with the right status, type, param and code.
func TestErrorsThroughGoOpenAI(t *testing.T) {
	loadReference(t)
	tooLong := repeatedText(t, 32768) // + EOS = 32769 tokens
	tests := []struct {
		name   string
		flags  []string
		req    openai.EmbeddingRequestConverter
		status int
		param  string
		code   string
		msg    string // substring of the message
	}{
		{name: "empty string", req: openai.EmbeddingRequest{Input: "", Model: "m"},
			status: 400, param: "input", code: codeEmptyInput, msg: "input 0 is an empty string"},
		{name: "empty string among others", req: openai.EmbeddingRequestStrings{Input: []string{"a", "b", ""}, Model: "m"},
			status: 400, param: "input", code: codeEmptyInput, msg: "input 2 is an empty string"},
		{name: "dimensions below 32", req: openai.EmbeddingRequestStrings{Input: []string{"a"}, Model: "m", Dimensions: 31},
			status: 400, param: "dimensions", code: codeInvalidDimensions, msg: "'dimensions' must be between 32 and"},
		{name: "over-length input", req: openai.EmbeddingRequestStrings{Input: []string{"short", tooLong}, Model: "m"},
			status: 400, param: "input", code: codeContextLength,
			msg: "This model's maximum context length is 32768 tokens, however you requested 32769 tokens (32769 in your prompt; 0 for the completion) in input 1."},
		{name: "unknown model on a strict server", flags: []string{"--strict-model"},
			req:    openai.EmbeddingRequestStrings{Input: []string{"a"}, Model: "text-embedding-ada-002"},
			status: 404, param: "model", code: codeModelNotFound, msg: "The model `text-embedding-ada-002` does not exist"},
		{name: "unknown model with a suffix on a strict server", flags: []string{"--strict-model"},
			req:    openai.EmbeddingRequestStrings{Input: []string{"a"}, Model: "other:query"},
			status: 404, param: "model", code: codeModelNotFound, msg: "The model `other:query` does not exist"},
		{name: "native out-of-vocabulary id", flags: []string{"--token-ids=native"},
			req:    openai.EmbeddingRequestTokens{Input: [][]int{{9707}, {9707, 1 << 24}}, Model: "m"},
			status: 400, param: "input", code: codeInvalidTokenID, msg: "input 1 holds token id 16777216 at position 1"},
		{name: "native negative id", flags: []string{"--token-ids=native"},
			req:    openai.EmbeddingRequest{Input: []int{-1}, Model: "m"},
			status: 400, param: "input", code: codeInvalidTokenID, msg: "input 0 holds token id -1 at position 0"},
		{name: "token ids on a reject server", flags: []string{"--token-ids=reject"},
			req:    openai.EmbeddingRequestTokens{Input: [][]int{{9707}}, Model: "m"},
			status: 400, param: "input", code: codeTokenIDsRefused, msg: "--token-ids=reject"},
		{name: "id outside cl100k", req: openai.EmbeddingRequest{Input: []int{100, 1 << 20}, Model: "m"},
			status: 400, param: "input", code: codeInvalidTokenID, msg: "input 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := serverWith(t, tc.flags...)
			e := embedErr(t, s.client(nil), tc.req)
			requireAPIError(t, e, tc.status, tc.param, tc.code)
			if !strings.Contains(e.Message, tc.msg) {
				t.Errorf("message %q\nwant it to contain %q", e.Message, tc.msg)
			}
		})
	}
}

// TestErrorEnvelopes sends malformed and over-limit bodies with net/http and checks the
// exact envelope: every key present, type by status, param and code (nil = null).
func TestErrorEnvelopes(t *testing.T) {
	s := defaultServer(t)
	loadReference(t)
	many := make([]string, 2049)
	for i := range many {
		many[i] = "x"
	}
	// Ten inputs of 30001 tokens: each within the per-input limit, 300010 in all.
	chunk := repeatedText(t, 30000)
	heavy := make([]string, 10)
	for i := range heavy {
		heavy[i] = chunk
	}
	tests := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		param  *string
		code   *string
		msg    string
	}{
		{"empty array", "POST", "/v1/embeddings", map[string]any{"input": []string{}, "model": "m"}, 400, ptr("input"), nil, "'input' must not be an empty array."},
		{"empty token array", "POST", "/v1/embeddings", map[string]any{"input": [][]int{{}}, "model": "m"}, 400, ptr("input"), nil, "input 0 is an empty array of token ids."},
		{"missing input", "POST", "/v1/embeddings", map[string]any{"model": "m"}, 400, ptr("input"), nil, "'input' is a required property."},
		{"input of wrong type", "POST", "/v1/embeddings", map[string]any{"input": 42, "model": "m"}, 400, ptr("input"), nil, "'input' must be a string"},
		{"mixed input array", "POST", "/v1/embeddings", `{"input":["a",1],"model":"m"}`, 400, ptr("input"), nil, ""},
		{"bad encoding_format", "POST", "/v1/embeddings", map[string]any{"input": "a", "encoding_format": "int4"}, 400, ptr("encoding_format"), nil, "is not one of ['float', 'base64', 'int8', 'uint8', 'binary', 'ubinary'] - 'encoding_format'"},
		{"dimensions zero", "POST", "/v1/embeddings", map[string]any{"input": "a", "dimensions": 0}, 400, ptr("dimensions"), nil, ""},
		{"dimensions negative", "POST", "/v1/embeddings", map[string]any{"input": "a", "dimensions": -1}, 400, ptr("dimensions"), nil, ""},
		{"dimensions as string", "POST", "/v1/embeddings", map[string]any{"input": "a", "dimensions": "64"}, 400, ptr("dimensions"), nil, ""},
		{"dimensions fractional", "POST", "/v1/embeddings", `{"input":"a","dimensions":64.5}`, 400, ptr("dimensions"), nil, ""},
		{"empty instruction", "POST", "/v1/embeddings", map[string]any{"input": "a", "input_type": "query", "instruction": ""}, 400, ptr("instruction"), ptr(codeInvalidValue), ""},
		{"too long instruction", "POST", "/v1/embeddings", map[string]any{"input": "a", "input_type": "query", "instruction": strings.Repeat("x", 4097)}, 400, ptr("instruction"), ptr(codeInvalidValue), ""},
		{"not JSON", "POST", "/v1/embeddings", `{"input": "a",`, 400, nil, nil, "We could not parse the JSON body"},
		{"2049 inputs", "POST", "/v1/embeddings", map[string]any{"input": many, "model": "m"}, 400, ptr("input"), ptr(codeTooManyInputs), "2049"},
		{"over 300000 tokens in all", "POST", "/v1/embeddings", map[string]any{"input": heavy, "model": "m"}, 400, ptr("input"), ptr(codeTooManyTokens), "300000"},
		{"unknown route", "GET", "/v1/nothing-here", nil, 404, nil, ptr(codeNotFound), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(t, tc.method, tc.path, tc.body, nil)
			env := requireErrorEnvelope(t, r, tc.status)
			if strPtr(env.Error.Param) != strPtr(tc.param) {
				t.Errorf("param %s, want %s", strPtr(env.Error.Param), strPtr(tc.param))
			}
			if strPtr(env.Error.Code) != strPtr(tc.code) {
				t.Errorf("code %s, want %s", strPtr(env.Error.Code), strPtr(tc.code))
			}
			if !strings.Contains(env.Error.Message, tc.msg) {
				t.Errorf("message %q\nwant it to contain %q", env.Error.Message, tc.msg)
			}
		})
	}
}

// TestStrictModel: a --strict-model server accepts its configured id (also with a
// suffix) and refuses every other name with 404 model_not_found, except its id with
// a suffix that is not an input type (400, as without --strict-model).
func TestStrictModel(t *testing.T) {
	s := serverWith(t, "--strict-model")
	id := s.modelID(t)
	c := s.client(nil)
	const text = "strict"
	for _, tc := range []struct {
		model string
		want  expectation
	}{
		{id, expectDocument(t, text)},
		{id + ":query", expectQuery(t, defaultTask, text)},
		{id + ":document", expectDocument(t, text)},
	} {
		t.Run(tc.model, func(t *testing.T) {
			resp := embed(t, c, openai.EmbeddingRequestStrings{Input: []string{text}, Model: openai.EmbeddingModel(tc.model)})
			if string(resp.Model) != tc.model {
				t.Errorf("model %q, want %q echoed", resp.Model, tc.model)
			}
			requireReference(t, "vector", f64(resp.Data[0].Embedding), tc.want)
		})
	}
	for _, model := range []string{"text-embedding-3-small", id + "-other", strings.ToUpper(id) + "X"} {
		t.Run("refuse "+model, func(t *testing.T) {
			e := embedErr(t, c, openai.EmbeddingRequestStrings{Input: []string{text}, Model: openai.EmbeddingModel(model)})
			requireAPIError(t, e, http.StatusNotFound, "model", codeModelNotFound)
		})
	}
	// GET /v1/models/{id} agrees with /v1/embeddings: the accepted names are found
	// (go-openai's GetModel), the refused ones are 404 in OpenAI's envelope.
	for _, model := range []string{id, id + ":query"} {
		if got, err := c.GetModel(ctx(t), model); err != nil || got.ID != model {
			t.Errorf("GetModel(%q) = %+v, %v; want the model", model, got, err)
		}
	}
	for _, model := range []string{"no-such-model", id + ":querying"} {
		r := s.do(t, http.MethodGet, "/v1/models/"+model, nil, nil)
		env := requireErrorEnvelope(t, r, http.StatusNotFound)
		if strPtr(env.Error.Param) != strPtr(ptr("model")) || strPtr(env.Error.Code) != strPtr(ptr(codeModelNotFound)) || !strings.Contains(env.Error.Message, "`"+model+"`") {
			t.Errorf("GET /v1/models/%s: %+v", model, env.Error)
		}
	}
	// The served id with a suffix that is not an input type is a typo of one: 400
	// naming the valid suffixes, not a 404 that says the model does not exist.
	t.Run("refuse "+id+":querying", func(t *testing.T) {
		e := embedErr(t, c, openai.EmbeddingRequestStrings{Input: []string{text}, Model: openai.EmbeddingModel(id + ":querying")})
		requireAPIError(t, e, http.StatusBadRequest, "model", codeInvalidValue)
	})
}

// TestTokenIDPolicies: native ids are Qwen3 ids taken literally (a query gets the
// instruction prefix tokenized on its own in front of them); reject refuses ids but not
// text.
func TestTokenIDPolicies(t *testing.T) {
	loadReference(t)
	const text = "native ids are taken literally"
	ids := encode(t, text)
	asInts := make([]int, len(ids))
	for i, id := range ids {
		asInts[i] = int(id)
	}

	t.Run("native document", func(t *testing.T) {
		s := serverWith(t, "--token-ids=native")
		resp := embed(t, s.client(nil), openai.EmbeddingRequestTokens{Input: [][]int{asInts}, Model: "m"})
		want := expectDocument(t, text)
		requireReference(t, "vector", f64(resp.Data[0].Embedding), want)
		if resp.Usage.PromptTokens != len(ids)+1 {
			t.Errorf("prompt_tokens %d, want %d", resp.Usage.PromptTokens, len(ids)+1)
		}
	})
	t.Run("native query", func(t *testing.T) {
		s := serverWith(t, "--token-ids=native")
		resp := embed(t, s.client(nil), openai.EmbeddingRequest{Input: asInts, Model: "m", ExtraBody: map[string]any{"input_type": "query"}})
		prefix := encode(t, "Instruct: "+defaultTask+"\nQuery:")
		toks := append(append(append([]int32{}, prefix...), ids...), eosID)
		h, err := refState.model.LastToken(toks)
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		requireReference(t, "vector", f64(resp.Data[0].Embedding), expectation{wrapped: "<query prefix> + ids", tokens: toks, vec: normalized(h)})
		if resp.Usage.PromptTokens != len(toks) {
			t.Errorf("prompt_tokens %d, want %d", resp.Usage.PromptTokens, len(toks))
		}
	})
	t.Run("reject still takes text", func(t *testing.T) {
		s := serverWith(t, "--token-ids=reject")
		resp := embed(t, s.client(nil), openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m"})
		requireReference(t, "vector", f64(resp.Data[0].Embedding), expectDocument(t, text))
	})
	t.Run("cl100k is the default", func(t *testing.T) {
		s := defaultServer(t)
		// Qwen ids sent to a default server are read as cl100k ids: the vector is that of
		// the text they decode to under cl100k, not of the text they mean in Qwen.
		decoded := cl100kDecode(t, asInts)
		if decoded == text || !utf8.ValidString(decoded) {
			t.Fatalf("the Qwen ids decode under cl100k to %q; pick a text that gives other, valid UTF-8", decoded)
		}
		resp := embed(t, s.client(nil), openai.EmbeddingRequestTokens{Input: [][]int{asInts}, Model: "m"})
		requireReference(t, "vector", f64(resp.Data[0].Embedding), expectDocument(t, decoded))
	})
}

// TestAPIErrorIsTyped guards the premise of the error tests: go-openai only builds an
// *APIError from OpenAI's envelope, so an envelope-less 4xx would show up as a
// *RequestError instead.
func TestAPIErrorIsTyped(t *testing.T) {
	s := defaultServer(t)
	_, err := s.client(nil).CreateEmbeddings(ctx(t), openai.EmbeddingRequest{Input: "", Model: "m"})
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		t.Fatalf("got *openai.RequestError (no envelope): %v", err)
	}
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("got %T %v, want *openai.APIError", err, err)
	}
}

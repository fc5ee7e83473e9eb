package conformance

import (
	"fmt"
	"math"
	"net/http"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// TestInputForms sends every form of `input` the contract allows through go-openai and
// checks the response shape, order, usage and every vector against the reference. Token-id
// inputs are cl100k ids (the server's default policy), so they must embed as their text.
func TestInputForms(t *testing.T) {
	s := defaultServer(t)
	c := s.client(nil)
	const model = "text-embedding-3-small"

	tests := []struct {
		name  string
		input any
		texts []string // the documents the inputs stand for, in order
	}{
		{"string", "The quick brown fox jumps over the lazy dog.", []string{"The quick brown fox jumps over the lazy dog."}},
		{"strings", []string{"alpha beta", "γράμμα and 東京タワー", "alpha beta", "x"}, []string{"alpha beta", "γράμμα and 東京タワー", "alpha beta", "x"}},
		{"one token-id input", cl100k(t, "naïve café: résumé"), []string{"naïve café: résumé"}},
		{"token-id inputs", [][]int{cl100k(t, "hello world"), cl100k(t, "emoji 🧪 and\ttabs\n")}, []string{"hello world", "emoji 🧪 and\ttabs\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := embed(t, c, openai.EmbeddingRequest{Input: tc.input, Model: model})
			if resp.Object != "list" {
				t.Errorf("object %q, want list", resp.Object)
			}
			if string(resp.Model) != model {
				t.Errorf("model %q, want the request's %q echoed", resp.Model, model)
			}
			if len(resp.Data) != len(tc.texts) {
				t.Fatalf("%d vectors, want %d", len(resp.Data), len(tc.texts))
			}
			wantTokens := 0
			for i, text := range tc.texts {
				want := expectDocument(t, text)
				wantTokens += len(want.tokens)
				d := resp.Data[i]
				if d.Object != "embedding" || d.Index != i {
					t.Errorf("data[%d]: object %q index %d, want embedding %d", i, d.Object, d.Index, i)
				}
				requireReference(t, fmt.Sprintf("data[%d]", i), f64(d.Embedding), want)
			}
			if resp.Usage.PromptTokens != wantTokens || resp.Usage.TotalTokens != wantTokens {
				t.Errorf("usage prompt=%d total=%d, want both %d (wrapped tokens with EOS)",
					resp.Usage.PromptTokens, resp.Usage.TotalTokens, wantTokens)
			}
		})
	}
}

// TestCl100kIDsEqualText: cl100k ids are decoded and re-tokenized, so they must give the
// same vector and usage as the text itself — also for a query, whose wrapping applies to
// the decoded text.
func TestCl100kIDsEqualText(t *testing.T) {
	s := defaultServer(t)
	c := s.client(nil)
	texts := []string{"LangChain sends cl100k ids by default", "Ünïcödé splits across tokens: 𝔘𝔫𝔦"}
	ids := make([][]int, len(texts))
	for i, text := range texts {
		ids[i] = cl100k(t, text)
	}
	for _, inputType := range []string{"document", "query"} {
		t.Run(inputType, func(t *testing.T) {
			extra := map[string]any{"input_type": inputType}
			byText := embed(t, c, openai.EmbeddingRequestStrings{Input: texts, Model: "m", ExtraBody: extra})
			byIDs := embed(t, c, openai.EmbeddingRequestTokens{Input: ids, Model: "m", ExtraBody: extra})
			if len(byIDs.Data) != len(texts) || len(byText.Data) != len(texts) {
				t.Fatalf("got %d and %d vectors, want %d", len(byText.Data), len(byIDs.Data), len(texts))
			}
			for i := range texts {
				requireSame(t, fmt.Sprintf("input %d ids vs text", i), f64(byIDs.Data[i].Embedding), f64(byText.Data[i].Embedding))
			}
			if byIDs.Usage != byText.Usage {
				t.Errorf("usage for ids %+v, for text %+v; want equal", byIDs.Usage, byText.Usage)
			}
		})
	}
}

// TestBase64MatchesFloat: base64 is the little-endian float32 bytes of the same vector,
// so the two encodings agree bit for bit.
func TestBase64MatchesFloat(t *testing.T) {
	s := defaultServer(t)
	c := s.client(nil)
	input := []string{"first document", "second, longer document with more words in it"}
	fl := embed(t, c, openai.EmbeddingRequestStrings{Input: input, Model: "m", EncodingFormat: openai.EmbeddingEncodingFormatFloat})
	b64 := embed(t, c, openai.EmbeddingRequestStrings{Input: input, Model: "m", EncodingFormat: openai.EmbeddingEncodingFormatBase64})
	if len(fl.Data) != 2 || len(b64.Data) != 2 {
		t.Fatalf("got %d float and %d base64 vectors, want 2 each", len(fl.Data), len(b64.Data))
	}
	for i := range fl.Data {
		a, b := fl.Data[i].Embedding, b64.Data[i].Embedding
		if len(a) != len(b) {
			t.Fatalf("data[%d]: %d floats vs %d from base64", i, len(a), len(b))
		}
		for j := range a {
			if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
				t.Fatalf("data[%d][%d]: float %v, base64 %v; want identical bits", i, j, a[j], b[j])
			}
		}
		if b64.Data[i].Index != i || b64.Data[i].Object != "embedding" {
			t.Errorf("base64 data[%d]: object %q index %d", i, b64.Data[i].Object, b64.Data[i].Index)
		}
	}
	if fl.Usage != b64.Usage {
		t.Errorf("usage float %+v, base64 %+v; want equal", fl.Usage, b64.Usage)
	}
}

// TestDimensions: `dimensions` truncates the full vector and re-normalises it.
func TestDimensions(t *testing.T) {
	s := defaultServer(t)
	c := s.client(nil)
	const text = "Matryoshka representation learning"
	full := f64(embed(t, c, openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m"}).Data[0].Embedding)
	native := len(full)
	requireReference(t, "full vector", full, expectDocument(t, text))
	if native < 33 {
		t.Fatalf("native dimension %d; the test model must have more than 32", native)
	}

	for _, dims := range []int{32, 33, native / 2, native - 1, native} {
		for _, format := range []openai.EmbeddingEncodingFormat{openai.EmbeddingEncodingFormatFloat, openai.EmbeddingEncodingFormatBase64} {
			t.Run(fmt.Sprintf("%d/%s", dims, format), func(t *testing.T) {
				resp := embed(t, c, openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m", Dimensions: dims, EncodingFormat: format})
				got := f64(resp.Data[0].Embedding)
				if len(got) != dims {
					t.Fatalf("%d dimensions, want %d", len(got), dims)
				}
				requireUnitNorm(t, "truncated", got)
				want := normalized(full[:dims])
				if d := maxAbsDiff(got, want); d > sameTol {
					t.Errorf("max |Δ| from the full vector's renormalised prefix %.3g, want ≤ %g", d, sameTol)
				}
			})
		}
	}

	// Out of 32..native is invalid_value; below 1 the request decoder already refuses
	// it, with a null code (as OpenAI's schema validation does).
	for _, tc := range []struct {
		dims int
		code string
	}{{31, codeInvalidDimensions}, {1, codeInvalidDimensions}, {native + 1, codeInvalidDimensions}, {1 << 20, codeInvalidDimensions}, {-1, ""}} {
		t.Run(fmt.Sprintf("reject %d", tc.dims), func(t *testing.T) {
			e := embedErr(t, c, openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m", Dimensions: tc.dims})
			requireAPIError(t, e, http.StatusBadRequest, "dimensions", tc.code)
		})
	}
}

// TestUserAndUnknownFieldsIgnored: `user` and fields the server does not know change
// nothing.
func TestUserAndUnknownFieldsIgnored(t *testing.T) {
	s := defaultServer(t)
	plain := s.rawEmbed(t, map[string]any{"input": "ignore the noise", "model": "m"}, nil)
	noisy := s.rawEmbed(t, map[string]any{
		"input": "ignore the noise", "model": "m", "user": "user-1234",
		"frobnicate": map[string]any{"deep": []any{1, "two", nil}}, "temperature": 0.3,
	}, nil)
	if len(plain.Data) != 1 || len(noisy.Data) != 1 {
		t.Fatalf("got %d and %d vectors, want 1 each", len(plain.Data), len(noisy.Data))
	}
	requireSame(t, "with user and unknown fields", noisy.Data[0].Embedding, plain.Data[0].Embedding)
	if noisy.Usage != plain.Usage {
		t.Errorf("usage %+v, want %+v", noisy.Usage, plain.Usage)
	}
}

// TestResponseShape decodes the float response with unknown fields disallowed and checks
// every field, so an extra or misspelt key fails.
func TestResponseShape(t *testing.T) {
	s := defaultServer(t)
	r := s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": []string{"one", "two"}, "model": "shape-check"}, nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, truncate(r.body))
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" && ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var got rawEmbeddings
	r.decode(t, &got)
	if got.Object != "list" || got.Model != "shape-check" || len(got.Data) != 2 {
		t.Fatalf("object %q model %q with %d data; want list, shape-check, 2", got.Object, got.Model, len(got.Data))
	}
	wantTokens := 0
	for i, text := range []string{"one", "two"} {
		want := expectDocument(t, text)
		wantTokens += len(want.tokens)
		d := got.Data[i]
		if d.Object != "embedding" || d.Index != i {
			t.Errorf("data[%d]: object %q index %d", i, d.Object, d.Index)
		}
		requireReference(t, fmt.Sprintf("data[%d]", i), d.Embedding, want)
	}
	if got.Usage.PromptTokens != wantTokens || got.Usage.TotalTokens != wantTokens {
		t.Errorf("usage %+v, want %d/%d", got.Usage, wantTokens, wantTokens)
	}
}

// TestModelNameEchoed: by default any model name is accepted and echoed unchanged.
func TestModelNameEchoed(t *testing.T) {
	s := defaultServer(t)
	c := s.client(nil)
	for _, model := range []string{"text-embedding-ada-002", "text-embedding-3-large", s.modelID(t), "org/some model with spaces", "ünïcödé"} {
		t.Run(model, func(t *testing.T) {
			resp := embed(t, c, openai.EmbeddingRequestStrings{Input: []string{"echo"}, Model: openai.EmbeddingModel(model)})
			if string(resp.Model) != model {
				t.Errorf("model %q, want %q", resp.Model, model)
			}
			requireReference(t, "vector", f64(resp.Data[0].Embedding), expectDocument(t, "echo"))
		})
	}
}

// TestModelOmitted: a request without `model` is answered under the configured id.
func TestModelOmitted(t *testing.T) {
	s := defaultServer(t)
	got := s.rawEmbed(t, map[string]any{"input": "no model"}, nil)
	if id := s.modelID(t); got.Model != id {
		t.Errorf("model %q, want the configured id %q", got.Model, id)
	}
	requireReference(t, "vector", got.Data[0].Embedding, expectDocument(t, "no model"))
}

// TestControlTokensStayText: "<|endoftext|>" typed by a user is text, not the EOS id.
func TestControlTokensStayText(t *testing.T) {
	s := defaultServer(t)
	const text = "before <|endoftext|> after <|im_start|>"
	toks := encode(t, text)
	for _, id := range toks {
		if id >= eosID {
			t.Fatalf("reference tokenizer turned control-token text into id %d: %v", id, toks)
		}
	}
	resp := embed(t, s.client(nil), openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m"})
	want := expectDocument(t, text)
	requireReference(t, "vector", f64(resp.Data[0].Embedding), want)
	if resp.Usage.PromptTokens != len(want.tokens) {
		t.Errorf("prompt_tokens %d, want %d", resp.Usage.PromptTokens, len(want.tokens))
	}
}

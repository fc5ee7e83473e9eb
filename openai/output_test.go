package openai

import (
	"testing"
)

func TestDecodeOutputType(t *testing.T) {
	for _, c := range []struct {
		body     string
		typ      string
		base64   bool
		param    string // "" when the body is valid
		truncate string
	}{
		{body: `{"input":"a"}`, typ: "float"},
		{body: `{"input":"a","encoding_format":"base64"}`, typ: "float", base64: true},
		{body: `{"input":"a","encoding_format":"int8"}`, typ: "int8"},
		{body: `{"input":"a","encoding_format":"ubinary"}`, typ: "ubinary"},
		{body: `{"input":"a","output_dtype":"uint8"}`, typ: "uint8"},
		{body: `{"input":"a","output_dtype":"binary","encoding_format":"base64"}`, typ: "binary", base64: true},
		{body: `{"input":"a","embedding_types":["int8"]}`, typ: "int8"},
		{body: `{"input":"a","embedding_types":["base64"]}`, typ: "float", base64: true},
		{body: `{"input":"a","embedding_types":["int8"],"output_dtype":"int8","encoding_format":"int8"}`, typ: "int8"},
		{body: `{"input":"a","output_dtype":null,"embedding_types":null}`, typ: "float"},
		{body: `{"input":"a","encoding_format":"int4"}`, param: "encoding_format"},
		{body: `{"input":"a","output_dtype":"base64"}`, param: "output_dtype"},
		{body: `{"input":"a","output_dtype":1}`, param: "output_dtype"},
		{body: `{"input":"a","embedding_types":["int8","float"]}`, param: "embedding_types"},
		{body: `{"input":"a","embedding_types":[]}`, param: "embedding_types"},
		{body: `{"input":"a","embedding_types":"int8"}`, param: "embedding_types"},
		{body: `{"input":"a","embedding_types":["int4"]}`, param: "embedding_types"},
		{body: `{"input":"a","encoding_format":"int8","output_dtype":"binary"}`, param: "output_dtype"},
		// One rule both ways: a field naming float names a type (issue 28: float
		// with int8 gave int8, int8 with float a 400).
		{body: `{"input":"a","encoding_format":"float","output_dtype":"int8"}`, param: "output_dtype"},
		{body: `{"input":"a","output_dtype":"float","encoding_format":"int8"}`, param: "output_dtype"},
		{body: `{"input":"a","encoding_format":"float","embedding_types":["uint8"]}`, param: "embedding_types"},
		{body: `{"input":"a","encoding_format":"float","output_dtype":"float","embedding_types":["float"]}`, typ: "float"},
		{body: `{"input":"a","truncate":true}`, typ: "float", truncate: "end"},
		{body: `{"input":"a","truncate":false}`, typ: "float"},
		{body: `{"input":"a","truncate":null}`, typ: "float"},
		{body: `{"input":"a","truncate":"end"}`, typ: "float", truncate: "end"},
		{body: `{"input":"a","truncate":"start"}`, typ: "float", truncate: "start"},
		{body: `{"input":"a","truncate":"left"}`, param: "truncate"},
		{body: `{"input":"a","truncate":1}`, param: "truncate"},
	} {
		req, err := DecodeEmbeddingRequest([]byte(c.body))
		if c.param != "" {
			de, ok := err.(*DecodeError)
			if !ok || de.Param != c.param {
				t.Errorf("%s: error %v, want a DecodeError on %q", c.body, err, c.param)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		if req.OutputType != c.typ || req.Base64 != c.base64 || req.Truncate != c.truncate {
			t.Errorf("%s: type %q base64 %v truncate %q, want %q %v %q", c.body, req.OutputType, req.Base64, req.Truncate, c.typ, c.base64, c.truncate)
		}
	}
}

func TestQuantizedResponseJSON(t *testing.T) {
	r := EmbeddingResponse{Model: "m", Quantized: [][]byte{{0x7f, 0x81, 0}}, Signed: true, PromptTokens: 3}
	want := `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[127,-127,0]}],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}`
	if got := string(r.AppendJSON(nil)); got != want {
		t.Errorf("signed:\n got %s\nwant %s", got, want)
	}
	r.Signed = false
	if got := string(r.AppendJSON(nil)); got != `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[127,129,0]}],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}` {
		t.Errorf("unsigned: %s", got)
	}
	r.Base64 = true
	if got := string(r.AppendJSON(nil)); got != `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"f4EA"}],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}` {
		t.Errorf("base64: %s", got)
	}
}

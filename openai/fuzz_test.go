package openai

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeEmbeddingRequest feeds arbitrary bodies to the request decoder. For every
// body it must return either a request or a *DecodeError that names one of the
// request's fields (or none) with a message; it must never panic. A request it
// returns must be well formed (exactly one input form, at least one input, no empty
// token array, a known encoding, a non-negative int32 dimensions), must come from a
// syntactically valid JSON body, and must survive a round trip: encoded back to JSON
// and decoded again it is the same request.
//
//	go test ./openai -run '^$' -fuzz FuzzDecodeEmbeddingRequest -fuzztime 60s
//
// `make fuzz` (part of `make test`) runs it for a bounded time; the seed corpus is in
// testdata/fuzz/FuzzDecodeEmbeddingRequest and below.
func FuzzDecodeEmbeddingRequest(f *testing.F) {
	for _, seed := range []string{
		`{"input":"hello"}`,
		`{"input":["a","b"],"model":"m:query","encoding_format":"base64","dimensions":64}`,
		`{"input":[1,2,3]}`,
		`{"input":[[1],[2,3]],"user":"u"}`,
		`{"input":[[]]}`,
		`{"input":[]}`,
		`{"input":null}`,
		`{"input":"x","dimensions":64.0}`,
		`{"input":"x","dimensions":"64"}`,
		`{"input":"x","dimensions":-1}`,
		`{"input":"x","instruction":null,"input_type":"query"}`,
		`{"input":"x","encoding_format":"int8"}`,
		`{"input":"x","output_dtype":"binary","encoding_format":"base64","truncate":true}`,
		`{"input":"x","embedding_types":["base64"],"truncate":"start"}`,
		`{"input":["a",1]}`,
		`{"input":[-9223372036854775808]}`,
		`{"input":"\ud800 \u0000"}`,
		"{\"input\":\"\xff\"}",
		`[1]`,
		``,
		`{"input":[[[1]]]}`,
	} {
		f.Add([]byte(seed))
	}
	params := map[string]bool{"": true, "input": true, "model": true, "encoding_format": true,
		"dimensions": true, "user": true, "input_type": true, "instruction": true,
		"output_dtype": true, "embedding_types": true, "truncate": true}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeEmbeddingRequest(body)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T %v, want *DecodeError", err, err)
			}
			if de.Message == "" || !params[de.Param] {
				t.Fatalf("DecodeError param %q message %q", de.Param, de.Message)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not valid JSON: %q", body)
		}
		if !utf8.Valid(body) {
			t.Fatalf("accepted a body that is not UTF-8: %q", body)
		}
		checkWellFormed(t, req)

		again, err := DecodeEmbeddingRequest(encodeRequest(t, req))
		if err != nil {
			t.Fatalf("the re-encoded request %+v does not decode: %v", req, err)
		}
		if !reflect.DeepEqual(again, req) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", req, again)
		}
	})
}

func checkWellFormed(t *testing.T, req *EmbeddingRequest) {
	t.Helper()
	texts, tokens := len(req.Input.Texts) > 0, len(req.Input.Tokens) > 0
	if texts == tokens {
		t.Fatalf("input has %d texts and %d token arrays; want exactly one form", len(req.Input.Texts), len(req.Input.Tokens))
	}
	if req.Input.Len() < 1 {
		t.Fatalf("no inputs")
	}
	for i, seq := range req.Input.Tokens {
		if len(seq) == 0 {
			t.Fatalf("token array %d is empty", i)
		}
	}
	switch req.EncodingFormat {
	case "", EncodingFloat, EncodingBase64, TypeInt8, TypeUint8, TypeBinary, TypeUbinary:
	default:
		t.Fatalf("encoding_format %q accepted", req.EncodingFormat)
	}
	if !isOutputType(req.OutputType) {
		t.Fatalf("output type %q accepted", req.OutputType)
	}
	switch req.Truncate {
	case "", TruncateEnd, TruncateStart:
	default:
		t.Fatalf("truncate %q accepted", req.Truncate)
	}
	if req.Dimensions < 0 || req.Dimensions > math.MaxInt32 {
		t.Fatalf("dimensions %d accepted", req.Dimensions)
	}
}

// encodeRequest writes req back as a request body, omitting empty optional fields
// as a client would.
func encodeRequest(t *testing.T, req *EmbeddingRequest) []byte {
	t.Helper()
	m := map[string]any{}
	if len(req.Input.Texts) > 0 {
		m["input"] = req.Input.Texts
	} else {
		m["input"] = req.Input.Tokens
	}
	for k, v := range map[string]string{"model": req.Model, "encoding_format": req.EncodingFormat, "user": req.User, "input_type": req.InputType} {
		if v != "" {
			m[k] = v
		}
	}
	if req.Dimensions != 0 {
		m["dimensions"] = req.Dimensions
	}
	if req.OutputType != EncodingFloat && req.OutputType != req.EncodingFormat {
		m["output_dtype"] = req.OutputType
	}
	if req.Base64 && req.EncodingFormat != EncodingBase64 {
		m["embedding_types"] = []string{EncodingBase64}
	}
	if req.Truncate != "" {
		m["truncate"] = req.Truncate
	}
	if req.Instruction != nil {
		m["instruction"] = *req.Instruction
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal %+v: %v", req, err)
	}
	return b
}

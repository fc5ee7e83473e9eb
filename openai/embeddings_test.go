package openai

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestDecodeEmbeddingRequestInputForms(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Input
	}{
		{"string", `{"input":"hello"}`, Input{Texts: []string{"hello"}}},
		{"strings", `{"input":["a","b c"]}`, Input{Texts: []string{"a", "b c"}}},
		{"token ids", `{"input":[1, 2,3]}`, Input{Tokens: [][]int64{{1, 2, 3}}}},
		{"token id arrays", `{"input":[[1],[2,3]]}`, Input{Tokens: [][]int64{{1}, {2, 3}}}},
		{"negative id kept for routing to judge", `{"input":[-1]}`, Input{Tokens: [][]int64{{-1}}}},
		{"empty string kept for routing to judge", `{"input":""}`, Input{Texts: []string{""}}},
		{"whitespace around", "{\"input\": [ \"x\" ] }", Input{Texts: []string{"x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := DecodeEmbeddingRequest([]byte(tt.body))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(req.Input, tt.want) {
				t.Fatalf("input = %#v, want %#v", req.Input, tt.want)
			}
		})
	}
}

func TestDecodeEmbeddingRequestFields(t *testing.T) {
	req, err := DecodeEmbeddingRequest([]byte(`{"model":"m:query","input":"x","encoding_format":"base64","dimensions":64,"user":"u","input_type":"query","instruction":"Find it","unknown":{"a":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "m:query" || req.EncodingFormat != "base64" || req.Dimensions != 64 || req.User != "u" || req.InputType != "query" || req.Instruction == nil || *req.Instruction != "Find it" {
		t.Fatalf("decoded %+v", req)
	}
	req, err = DecodeEmbeddingRequest([]byte(`{"input":"x","dimensions":null,"instruction":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Dimensions != 0 || req.Instruction != nil {
		t.Fatalf("nulls decoded as %+v", req)
	}
}

func TestDecodeEmbeddingRequestErrors(t *testing.T) {
	tests := []struct {
		name, body, param, msg string
	}{
		{"not json", `{"input":`, "", "We could not parse the JSON body of your request: unexpected end of JSON input."},
		{"array body", `[1]`, "", "We could not parse the JSON body of your request: the body must be a JSON object, not array."},
		{"trailing data", `{"input":"x"} {}`, "", "We could not parse the JSON body of your request: invalid character '{' after top-level value."},
		{"missing input", `{"model":"m"}`, "input", "'input' is a required property."},
		{"empty array", `{"input":[]}`, "input", "'input' must not be an empty array."},
		{"object input", `{"input":{"a":1}}`, "input", "'input' must be a string, an array of strings, an array of integers (token ids), or an array of arrays of integers."},
		{"mixed array", `{"input":["a",1]}`, "input", "'input' must be a string, an array of strings, an array of integers (token ids), or an array of arrays of integers."},
		{"float ids", `{"input":[1.5]}`, "input", "'input' as an array of token ids must hold only integers."},
		{"empty id array", `{"input":[[1],[]]}`, "input", "input 1 is an empty array of token ids."},
		{"nested too deep", `{"input":[[[1]]]}`, "input", "'input' as an array of arrays must hold only integer token ids."},
		{"dimensions float", `{"input":"x","dimensions":64.5}`, "dimensions", "64.5 is not of type 'integer' - 'dimensions'"},
		{"dimensions string", `{"input":"x","dimensions":"64"}`, "dimensions", `"64" is not of type 'integer' - 'dimensions'`},
		{"dimensions zero", `{"input":"x","dimensions":0}`, "dimensions", "0 is less than the minimum of 1 - 'dimensions'"},
		{"dimensions negative", `{"input":"x","dimensions":-3}`, "dimensions", "-3 is less than the minimum of 1 - 'dimensions'"},
		{"encoding format", `{"input":"x","encoding_format":"int4"}`, "encoding_format", `"int4" is not one of ['float', 'base64', 'int8', 'uint8', 'binary', 'ubinary'] - 'encoding_format'`},
		{"model type", `{"input":"x","model":5}`, "model", "5 is not of type 'string' - 'model'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeEmbeddingRequest([]byte(tt.body))
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want *DecodeError", err)
			}
			if de.Param != tt.param || de.Message != tt.msg {
				t.Fatalf("got param %q message %q\nwant param %q message %q", de.Param, de.Message, tt.param, tt.msg)
			}
		})
	}
}

func TestResponseJSONRoundTrip(t *testing.T) {
	vecs := [][]float32{{0.1, -0.25, 1e-8, 3.4028235e38}, {float32(math.Pi), 0, -0, 1}}
	for _, b64 := range []bool{false, true} {
		r := EmbeddingResponse{Model: `m"x`, Vectors: vecs, Base64: b64, PromptTokens: 17}
		var got struct {
			Object string `json:"object"`
			Data   []struct {
				Object    string          `json:"object"`
				Index     int             `json:"index"`
				Embedding json.RawMessage `json:"embedding"`
			} `json:"data"`
			Model string `json:"model"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				TotalTokens  int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r.AppendJSON(nil), &got); err != nil {
			t.Fatalf("base64=%v: invalid JSON: %v", b64, err)
		}
		if got.Object != "list" || got.Model != `m"x` || got.Usage.PromptTokens != 17 || got.Usage.TotalTokens != 17 || len(got.Data) != 2 {
			t.Fatalf("base64=%v: envelope %+v", b64, got)
		}
		for i, d := range got.Data {
			if d.Object != "embedding" || d.Index != i {
				t.Fatalf("data[%d] = %+v", i, d)
			}
			var v []float32
			if b64 {
				var s string
				if err := json.Unmarshal(d.Embedding, &s); err != nil {
					t.Fatal(err)
				}
				var err error
				if v, err = DecodeBase64(s); err != nil {
					t.Fatal(err)
				}
			} else if err := json.Unmarshal(d.Embedding, &v); err != nil {
				t.Fatal(err)
			}
			for j := range v {
				if math.Float32bits(v[j]) != math.Float32bits(vecs[i][j]) && !(v[j] == 0 && vecs[i][j] == 0) {
					t.Fatalf("base64=%v: vector %d[%d] = %v, want %v (bit-exact)", b64, i, j, v[j], vecs[i][j])
				}
			}
		}
	}
}

func TestBase64Layout(t *testing.T) {
	// 1.0f is 0x3f800000: little-endian bytes 00 00 80 3f → "AACAPw==".
	if got := string(AppendBase64(nil, []float32{1})); got != "AACAPw==" {
		t.Fatalf("base64 of [1] = %q, want AACAPw==", got)
	}
	if _, err := DecodeBase64("AACA"); err == nil {
		t.Fatal("3 bytes decoded without error")
	}
}

func TestNewErrorNulls(t *testing.T) {
	b, _ := json.Marshal(NewError(TypeInvalidRequest, "bad", "", ""))
	if string(b) != `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}` {
		t.Fatalf("got %s", b)
	}
	b, _ = json.Marshal(NewError(TypeInvalidRequest, "bad", "input", "x"))
	if string(b) != `{"error":{"message":"bad","type":"invalid_request_error","param":"input","code":"x"}}` {
		t.Fatalf("got %s", b)
	}
}

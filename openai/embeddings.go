// Package openai holds the wire shapes of OpenAI's embeddings API as embed-stack
// serves them: the request with its `input` union, the response with float or
// base64 vectors, the model list and the error envelope; and the rerank shapes
// of Cohere's and Jina's API and of text-embeddings-inference (rerank.go).
//
// It knows JSON and nothing else: not gin, not which HTTP status an error maps to
// (package server owns that), not how vectors are made (package routing).
package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Encoding formats accepted in EmbeddingRequest.EncodingFormat.
const (
	EncodingFloat  = "float"
	EncodingBase64 = "base64"
)

// EmbeddingRequest is the body of POST /v1/embeddings.
//
// InputType and Instruction are embed-stack extensions (sent through the SDKs'
// extra-body mechanisms); OpenAI clients that do not send them get the server's
// defaults. Unknown fields, `user` among them, are ignored as OpenAI does.
type EmbeddingRequest struct {
	Model          string
	Input          Input
	EncodingFormat string
	// Dimensions is 0 when the field is absent or null.
	Dimensions  int
	User        string
	InputType   string
	Instruction *string

	// OutputType is "float" or a quantized type (int8, uint8, binary, ubinary), from
	// encoding_format, output_dtype or embedding_types (output.go); Base64 asks for
	// base64 of the float32 or quantized bytes.
	OutputType string
	Base64     bool
	// Truncate is "" (too long = 400), TruncateEnd or TruncateStart.
	Truncate string
}

// Input is the `input` union. Exactly one of Texts and Tokens is set: a JSON string
// or array of strings fills Texts; an array of integers (one pre-tokenized input) or
// an array of integer arrays fills Tokens.
type Input struct {
	Texts  []string
	Tokens [][]int64
}

// Len is the number of inputs.
func (in Input) Len() int { return len(in.Texts) + len(in.Tokens) }

// DecodeError is a request body that is not a valid embeddings request. Param names
// the offending field, as OpenAI's error envelope does.
type DecodeError struct {
	Param   string
	Message string
}

func (e *DecodeError) Error() string { return e.Message }

// wireRequest mirrors EmbeddingRequest with the fields whose JSON needs checking by
// hand kept raw, so a wrong type is reported against the right param.
type wireRequest struct {
	Model          json.RawMessage `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat json.RawMessage `json:"encoding_format"`
	Dimensions     json.RawMessage `json:"dimensions"`
	User           json.RawMessage `json:"user"`
	InputType      json.RawMessage `json:"input_type"`
	Instruction    json.RawMessage `json:"instruction"`
	OutputDtype    json.RawMessage `json:"output_dtype"`
	EmbeddingTypes json.RawMessage `json:"embedding_types"`
	Truncate       json.RawMessage `json:"truncate"`
}

// DecodeEmbeddingRequest parses and type-checks a request body. It checks shapes
// only (types, emptiness, integer-ness); limits and meaning are for routing.
func DecodeEmbeddingRequest(body []byte) (*EmbeddingRequest, error) {
	var w wireRequest
	if err := decodeExact(body, &w); err != nil {
		return nil, err
	}
	if err := CheckUTF8(body, "input", inputItem); err != nil {
		return nil, err
	}
	var req EmbeddingRequest
	var err error
	if req.Model, err = decodeModel(w.Model); err != nil {
		return nil, err
	}
	if req.EncodingFormat, err = optString(w.EncodingFormat, "encoding_format"); err != nil {
		return nil, err
	}
	if req.User, err = optString(w.User, "user"); err != nil {
		return nil, err
	}
	if req.InputType, err = optString(w.InputType, "input_type"); err != nil {
		return nil, err
	}
	if req.Instruction, err = optStringPtr(w.Instruction, "instruction"); err != nil {
		return nil, err
	}
	if req.Dimensions, err = decodeDimensions(w.Dimensions); err != nil {
		return nil, err
	}
	if isNull(w.Input) {
		return nil, &DecodeError{Param: "input", Message: "'input' is a required property."}
	}
	if req.Input, err = decodeInput(w.Input); err != nil {
		return nil, err
	}
	if err := resolveOutput(&req, w.OutputDtype, w.EmbeddingTypes); err != nil {
		return nil, err
	}
	if req.Truncate, err = DecodeTruncate(w.Truncate); err != nil {
		return nil, err
	}
	return &req, nil
}

// inputItem names input i in messages, as OpenAI's do: "input 2".
func inputItem(i int) string { return fmt.Sprintf("input %d", i) }

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func optString(raw json.RawMessage, param string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", &DecodeError{Param: param, Message: fmt.Sprintf("%s is not of type 'string' - '%s'", compact(raw), param)}
	}
	return s, nil
}

// decodeModel reads the model field: absent or null is "" (the default model), and
// an empty string is refused, since it names no model (issue 28: it fell through to
// the default model).
func decodeModel(raw json.RawMessage) (string, error) {
	m, err := optString(raw, "model")
	if err == nil && m == "" && !isNull(raw) {
		return "", &DecodeError{Param: "model", Message: "'model' is an empty string; name a model (GET /v1/models lists them), or leave the field out for the default."}
	}
	return m, err
}

func decodeDimensions(raw json.RawMessage) (int, error) {
	if isNull(raw) {
		return 0, nil
	}
	var n json.Number
	// json.Number also accepts a quoted number; OpenAI does not.
	if c := bytes.TrimSpace(raw)[0]; c == '"' || json.Unmarshal(raw, &n) != nil {
		return 0, &DecodeError{Param: "dimensions", Message: fmt.Sprintf("%s is not of type 'integer' - 'dimensions'", compact(raw))}
	}
	v, err := strconv.ParseInt(n.String(), 10, 32)
	if err != nil {
		return 0, &DecodeError{Param: "dimensions", Message: fmt.Sprintf("%s is not of type 'integer' - 'dimensions'", n)}
	}
	if v < 1 {
		return 0, &DecodeError{Param: "dimensions", Message: fmt.Sprintf("%d is less than the minimum of 1 - 'dimensions'", v)}
	}
	return int(v), nil
}

// decodeInput dispatches on the first element to decode the union without trying
// every type in turn.
func decodeInput(raw json.RawMessage) (Input, error) {
	raw = bytes.TrimSpace(raw)
	bad := func() (Input, error) {
		return Input{}, &DecodeError{Param: "input", Message: "'input' must be a string, an array of strings, an array of integers (token ids), or an array of arrays of integers."}
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return bad()
		}
		return Input{Texts: []string{s}}, nil
	case '[':
	default:
		return bad()
	}
	first := bytes.TrimSpace(raw[1:])
	if len(first) == 0 {
		return bad()
	}
	switch c := first[0]; {
	case c == ']':
		return Input{}, &DecodeError{Param: "input", Message: "'input' must not be an empty array."}
	case c == '"':
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return bad()
		}
		return Input{Texts: ss}, nil
	case c == '[':
		var ids [][]int64
		if err := json.Unmarshal(raw, &ids); err != nil {
			return Input{}, &DecodeError{Param: "input", Message: "'input' as an array of arrays must hold only integer token ids."}
		}
		for i, seq := range ids {
			if len(seq) == 0 {
				return Input{}, &DecodeError{Param: "input", Message: fmt.Sprintf("input %d is an empty array of token ids.", i)}
			}
		}
		return Input{Tokens: ids}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		var ids []int64
		if err := json.Unmarshal(raw, &ids); err != nil {
			return Input{}, &DecodeError{Param: "input", Message: "'input' as an array of token ids must hold only integers."}
		}
		return Input{Tokens: [][]int64{ids}}, nil
	default:
		return bad()
	}
}

func compact(raw json.RawMessage) string {
	const max = 64
	s := string(bytes.TrimSpace(raw))
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

func jsonErrorText(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return se.Error() + "."
	case errors.As(err, &te):
		return fmt.Sprintf("the body must be a JSON object, not %s.", te.Value)
	default:
		return err.Error() + "."
	}
}

// EmbeddingResponse is the body of a successful POST /v1/embeddings.
type EmbeddingResponse struct {
	Model string
	// Vectors are in input order; Data[i].index is i.
	Vectors [][]float32
	// Base64 selects encoding_format "base64": little-endian float32 bytes, or the
	// bytes of Quantized.
	Base64 bool
	// Quantized, when set, replaces Vectors: one quantized vector per input, written
	// as integers (int8 when Signed, else uint8) or, with Base64, as their bytes.
	Quantized    [][]byte
	Signed       bool
	PromptTokens int
	// Cached adds usage.prompt_tokens_details.cached_tokens, the tokens of the
	// inputs the embedding cache answered (CachedTokens, part of PromptTokens), in
	// the place OpenAI reports a prompt cache's; absent when the server has no
	// cache, as OpenAI's embeddings answers have none.
	Cached       bool
	CachedTokens int
}

// AppendJSON appends the response as JSON. It is written by hand because
// encoding/json's reflection dominates the cost of a 2048-vector response, and
// because float32 values must be formatted at float32 precision (the shortest
// decimal that parses back to the same float32).
func (r *EmbeddingResponse) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	n := len(r.Vectors)
	if r.Quantized != nil {
		n = len(r.Quantized)
	}
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"object":"embedding","index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"embedding":`...)
		switch {
		case r.Quantized != nil:
			dst = r.appendQuantized(dst, i)
		case r.Base64:
			dst = append(dst, '"')
			dst = AppendBase64(dst, r.Vectors[i])
			dst = append(dst, '"')
		default:
			dst = AppendFloats(dst, r.Vectors[i])
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `],"model":`...)
	dst = appendString(dst, r.Model)
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(r.PromptTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(r.PromptTokens), 10)
	if r.Cached {
		dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, int64(r.CachedTokens), 10)
		dst = append(dst, '}')
	}
	dst = append(dst, "}}"...)
	return dst
}

// AppendFloats appends v as a JSON array of numbers. Non-finite values, which JSON
// cannot carry, are written as 0; routing never returns them.
func AppendFloats(dst []byte, v []float32) []byte {
	dst = append(dst, '[')
	for i, f := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			f = 0
		}
		dst = strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
	}
	return append(dst, ']')
}

// AppendBase64 appends v as standard base64 of its little-endian float32 bytes, the
// layout the official SDKs decode (numpy.frombuffer(..., dtype="float32") and
// Float32Array on a little-endian host).
func AppendBase64(dst []byte, v []float32) []byte {
	raw := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.AppendEncode(dst, raw)
}

// DecodeBase64 is the inverse of AppendBase64; clients and tests use it.
func DecodeBase64(s string) ([]float32, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decode base64 embedding: %w", err)
	}
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("decode base64 embedding: %d bytes is not a whole number of float32s", len(raw))
	}
	v := make([]float32, len(raw)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v, nil
}

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

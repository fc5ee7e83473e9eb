package openai

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
)

// Output types: the quantized ones are named as Cohere's `embedding_types` and
// Voyage's `output_dtype` name them (package quantize defines their scaling).
const (
	TypeInt8    = "int8"
	TypeUint8   = "uint8"
	TypeBinary  = "binary"
	TypeUbinary = "ubinary"
)

// outputTypes are the values of output_dtype and the quantized values of
// encoding_format and embedding_types.
var outputTypes = []string{EncodingFloat, TypeInt8, TypeUint8, TypeBinary, TypeUbinary}

func isOutputType(s string) bool {
	for _, t := range outputTypes {
		if s == t {
			return true
		}
	}
	return false
}

// Truncation directions carried in EmbeddingRequest.Truncate.
const (
	TruncateEnd   = "end"
	TruncateStart = "start"
)

// DecodeTruncate reads the `truncate` field: absent, null or false = "" (an input
// over the limit is a 400, OpenAI's contract); true or "end" = TruncateEnd (keep the
// beginning, as TEI's and Ollama's `truncate: true` do); "start" = TruncateStart
// (keep the end).
func DecodeTruncate(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		if b {
			return TruncateEnd, nil
		}
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case TruncateEnd, TruncateStart:
			return s, nil
		}
	}
	return "", &DecodeError{Param: "truncate", Message: fmt.Sprintf("%s is not one of [true, false, 'end', 'start'] - 'truncate'", compact(raw))}
}

// resolveOutput decides the output type and base64-ness from the three fields
// clients use: OpenAI's encoding_format (float, base64, or a quantized type),
// Voyage's output_dtype, and Cohere's embedding_types (a list, of which one entry is
// served since the response carries one `embedding` per input). One rule for all
// three: a field that names a type, float included, names it; fields that name
// different types are refused rather than one silently winning. (encoding_format
// "float" beside output_dtype "int8" used to give int8 while the reverse was a 400,
// issue 28.) base64 is an encoding, not a type, and goes with any type.
func resolveOutput(req *EmbeddingRequest, outputDtype, embeddingTypes json.RawMessage) error {
	type source struct{ param, value string }
	var named []source
	switch f := req.EncodingFormat; {
	case f == "":
	case f == EncodingBase64:
		req.Base64 = true
	case isOutputType(f):
		named = append(named, source{"encoding_format", f})
	default:
		return &DecodeError{Param: "encoding_format", Message: fmt.Sprintf("%q is not one of ['float', 'base64', 'int8', 'uint8', 'binary', 'ubinary'] - 'encoding_format'", f)}
	}
	dtype, err := optString(outputDtype, "output_dtype")
	if err != nil {
		return err
	}
	if dtype != "" {
		if !isOutputType(dtype) {
			return &DecodeError{Param: "output_dtype", Message: fmt.Sprintf("%q is not one of ['float', 'int8', 'uint8', 'binary', 'ubinary'] - 'output_dtype'", dtype)}
		}
		named = append(named, source{"output_dtype", dtype})
	}
	if !isNull(embeddingTypes) {
		var types []string
		if json.Unmarshal(embeddingTypes, &types) != nil {
			return &DecodeError{Param: "embedding_types", Message: fmt.Sprintf("%s is not of type 'array' of strings - 'embedding_types'", compact(embeddingTypes))}
		}
		if len(types) != 1 {
			return &DecodeError{Param: "embedding_types", Message: fmt.Sprintf("'embedding_types' must name exactly one type here (the response carries one `embedding` per input); got %d. Send one request per type.", len(types))}
		}
		switch t := types[0]; {
		case t == EncodingBase64:
			req.Base64 = true
		case isOutputType(t):
			named = append(named, source{"embedding_types", t})
		default:
			return &DecodeError{Param: "embedding_types", Message: fmt.Sprintf("%q is not one of ['float', 'int8', 'uint8', 'binary', 'ubinary', 'base64'] - 'embedding_types'", t)}
		}
	}
	req.OutputType = EncodingFloat
	for i, s := range named {
		if i > 0 && s.value != named[0].value {
			return &DecodeError{Param: s.param, Message: fmt.Sprintf("'%s' asks for %q but '%s' for %q; name one output type.", named[0].param, named[0].value, s.param, s.value)}
		}
		req.OutputType = s.value
	}
	return nil
}

// AppendInts appends quantized bytes as a JSON array of integers, as int8 when
// signed, else as uint8.
func AppendInts(dst []byte, b []byte, signed bool) []byte {
	dst = append(dst, '[')
	for i, x := range b {
		if i > 0 {
			dst = append(dst, ',')
		}
		if signed {
			dst = strconv.AppendInt(dst, int64(int8(x)), 10)
		} else {
			dst = strconv.AppendUint(dst, uint64(x), 10)
		}
	}
	return append(dst, ']')
}

// appendQuantized writes one quantized embedding: an integer array, or with base64
// the standard base64 of the bytes themselves (int8 or uint8, one per integer:
// numpy.frombuffer(..., dtype=numpy.int8 or numpy.uint8) reads them back, as with
// Voyage's base64 output).
func (r *EmbeddingResponse) appendQuantized(dst []byte, i int) []byte {
	b := r.Quantized[i]
	if r.Base64 {
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"')
	}
	return AppendInts(dst, b, r.Signed)
}

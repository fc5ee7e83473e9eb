// Package teiapi holds the wire shapes of Hugging Face text-embeddings-inference's
// embedding API as embed-stack serves it, so that clients written for TEI
// (huggingface_hub's InferenceClient.feature_extraction, Haystack's TEI embedders,
// the Chroma Go client) work unchanged: POST /embed with "inputs" (and POST /, where
// TEI serves the same), its error body and the fields of GET /info. The shapes
// follow TEI's router/src/http/types.rs and router/src/lib.rs.
//
// It knows JSON and nothing else: not gin, not which HTTP status an error maps to
// (package server owns that), not how vectors are made (package routing). TEI's
// rerank shapes predate this package and live in package openai.
package teiapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Error types of TEI's error body, as its ErrorType enum serialises.
const (
	TypeUnhealthy  = "Unhealthy"
	TypeBackend    = "Backend"
	TypeOverloaded = "Overloaded"
	TypeValidation = "Validation"
	TypeTokenizer  = "Tokenizer"
	TypeEmpty      = "Empty"
)

// ErrorBody is TEI's error answer: {"error": "...", "error_type": "Validation"}.
type ErrorBody struct {
	Error     string `json:"error"`
	ErrorType string `json:"error_type"`
}

// DecodeError is a body TEI's JSON extractor refuses: Syntax for a body that is
// not JSON (TEI: 400), otherwise one whose fields do not fit the request (TEI:
// 422). Message follows its wording, without serde's line and column.
type DecodeError struct {
	Syntax  bool
	Message string
}

func (e *DecodeError) Error() string { return e.Message }

// ValidationError is a request TEI refuses after decoding, with its error type
// (TypeValidation or TypeEmpty) and words.
type ValidationError struct {
	Type    string
	Message string
}

func (e *ValidationError) Error() string { return e.Message }

// Prompts are the sentence-transformers prompts of Qwen3-Embedding's
// config_sentence_transformers.json, which TEI's prompt_name selects: "query"
// wraps the text with the instruction, "document" leaves it.
var Prompts = []string{"query", "document"}

// EmbedRequest is a decoded POST /embed body in TEI's shape.
type EmbedRequest struct {
	// Inputs are the texts: TEI's "inputs", a string or an array of strings.
	Inputs []string
	// Single says "inputs" was one string (the answer is still a list).
	Single bool
	// Truncate is TEI's truncate (nil: the server's default, off as TEI's
	// --auto-truncate is).
	Truncate *bool
	// TruncateLeft is truncation_direction "left": the beginning is dropped.
	TruncateLeft bool
	// PromptName is "query", "document" or "" (none).
	PromptName string
	// Normalize is TEI's default true; false returns the pooled vector as it is.
	Normalize bool
	// Dimensions is 0 for absent or null.
	Dimensions int
	// Model names one of the served models, as /v1/embeddings' "model" does
	// (TEI serves one model and has no such field); "" is the first embedding
	// model.
	Model string
}

// IsEmbedRequest says whether a POST /embed body is in TEI's shape: it has the
// key "inputs" (the native shape has "texts"). A body that is not a JSON object
// is not.
func IsEmbedRequest(body []byte) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return false
	}
	_, ok := fields["inputs"]
	return ok
}

func deserializeErr(format string, args ...any) error {
	return &DecodeError{Message: "Failed to deserialize the JSON body into the target type: " + fmt.Sprintf(format, args...)}
}

// DecodeEmbed parses a TEI embed body. Keys are matched exactly and unknown ones
// ignored, as serde does.
func DecodeEmbed(body []byte) (*EmbedRequest, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, deserializeErr("invalid type: %s, expected struct EmbedRequest", typeErr.Value)
		}
		return nil, &DecodeError{Syntax: true, Message: "Failed to parse the request body as JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	if key, ok := duplicateKey(body); ok {
		// serde refuses a field given twice; taking the last would let a proxy
		// that reads the first see another request than the server answers.
		return nil, deserializeErr("duplicate field `%s`", key)
	}
	req := &EmbedRequest{Normalize: true}
	raw, ok := fields["inputs"]
	if !ok {
		return nil, deserializeErr("missing field `inputs`")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil && !isNull(raw) {
		req.Inputs, req.Single = []string{one}, true
	} else if err := json.Unmarshal(raw, &req.Inputs); err != nil || isNull(raw) {
		var ids [][]int64
		var id []int64
		if json.Unmarshal(raw, &id) == nil || json.Unmarshal(raw, &ids) == nil {
			return nil, &ValidationError{Type: TypeValidation, Message: "Input validation error: `inputs` as token ids is not supported by this server; send text"}
		}
		return nil, deserializeErr("inputs: data did not match any variant of untagged enum Input")
	}
	if raw, ok := fields["model"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &req.Model) != nil {
			return nil, deserializeErr("model: invalid type: %s, expected a string", describe(raw))
		}
	}
	if raw, ok := fields["truncate"]; ok && !isNull(raw) {
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			return nil, deserializeErr("truncate: invalid type: %s, expected a boolean", describe(raw))
		}
		req.Truncate = &b
	}
	if raw, ok := fields["truncation_direction"]; ok {
		var dir string
		if json.Unmarshal(raw, &dir) != nil || isNull(raw) {
			return nil, deserializeErr("truncation_direction: invalid type: %s, expected enum TruncationDirection", describe(raw))
		}
		switch dir {
		case "Left", "left":
			req.TruncateLeft = true
		case "Right", "right":
		default:
			return nil, deserializeErr("truncation_direction: unknown variant `%s`, expected `Left` or `Right`", dir)
		}
	}
	if raw, ok := fields["prompt_name"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &req.PromptName) != nil {
			return nil, deserializeErr("prompt_name: invalid type: %s, expected a string", describe(raw))
		}
		if req.PromptName != "query" && req.PromptName != "document" {
			return nil, &ValidationError{Type: TypeValidation, Message: fmt.Sprintf(
				"Input validation error: `default-prompt-name` is set to `%s` but it was not found in the Sentence Transformers prompts. Available prompts: [%q, %q]",
				req.PromptName, Prompts[0], Prompts[1])}
		}
	}
	if raw, ok := fields["normalize"]; ok {
		if json.Unmarshal(raw, &req.Normalize) != nil || isNull(raw) {
			return nil, deserializeErr("normalize: invalid type: %s, expected a boolean", describe(raw))
		}
	}
	if raw, ok := fields["dimensions"]; ok && !isNull(raw) {
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return nil, deserializeErr("dimensions: invalid type: %s, expected usize", describe(raw))
		}
		d, err := n.Int64()
		if err != nil || d < 0 || d > 1<<31 {
			return nil, deserializeErr("dimensions: invalid value: %s, expected usize", describe(raw))
		}
		if d == 0 {
			return nil, &ValidationError{Type: TypeValidation, Message: "Input validation error: `dimensions` should be positive"}
		}
		req.Dimensions = int(d)
	}
	if len(req.Inputs) == 0 {
		return nil, &ValidationError{Type: TypeEmpty, Message: "`inputs` cannot be empty"}
	}
	return req, nil
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// duplicateKey returns a key that the JSON object body holds twice, if any.
func duplicateKey(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return "", false
		}
		if seen[key] {
			return key, true
		}
		seen[key] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return "", false
		}
	}
	return "", false
}

// describe names a JSON value as serde's messages do: "string \"x\"", "integer
// `5`", "null", "a sequence", "a map".
func describe(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "value"
	}
	switch t := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean `%t`", t)
	case string:
		return fmt.Sprintf("string %q", t)
	case float64:
		s := strings.TrimSpace(string(raw))
		if strings.ContainsAny(s, ".eE") {
			return "floating point `" + s + "`"
		}
		return "integer `" + s + "`"
	case []any:
		return "a sequence"
	}
	return "a map"
}

// AppendEmbeddings appends TEI's answer: a JSON array of arrays of numbers.
func AppendEmbeddings(dst []byte, vectors [][]float32, appendFloats func([]byte, []float32) []byte) []byte {
	dst = append(dst, '[')
	for i, v := range vectors {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendFloats(dst, v)
	}
	return append(dst, ']')
}

// Info is the part of TEI's GET /info that describes the served model and the
// router's limits; embed-stack's /info carries these keys beside its own, for the
// first embedding model (TEI serves one). Version, sha and docker_label are TEI's
// build keys: /info's own "version" stays embed-stack's.
type Info struct {
	ModelID               string    `json:"model_id"`
	ModelSHA              *string   `json:"model_sha"`
	ModelDtype            string    `json:"model_dtype"`
	ModelType             ModelType `json:"model_type"`
	MaxConcurrentRequests int       `json:"max_concurrent_requests"`
	MaxInputLength        int       `json:"max_input_length"`
	MaxBatchTokens        int       `json:"max_batch_tokens"`
	MaxBatchRequests      *int      `json:"max_batch_requests"`
	MaxClientBatchSize    int       `json:"max_client_batch_size"`
	AutoTruncate          bool      `json:"auto_truncate"`
	TokenizationWorkers   int       `json:"tokenization_workers"`
	SHA                   *string   `json:"sha"`
	DockerLabel           *string   `json:"docker_label"`
}

// ModelType is TEI's {"embedding": {"pooling": "last_token"}}.
type ModelType struct {
	Embedding *EmbeddingModel `json:"embedding,omitempty"`
}

// EmbeddingModel names the pooling of an embedding model.
type EmbeddingModel struct {
	Pooling string `json:"pooling"`
}

// PoolingName is TEI's name of a pooling (its Pool enum as /info writes it:
// "cls", "mean", "splade", "last_token") for embed-stack's ("last" for a
// sequence's last token).
func PoolingName(p string) string {
	if p == "last" {
		return "last_token"
	}
	return p
}

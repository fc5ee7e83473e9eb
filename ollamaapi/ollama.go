// Package ollamaapi holds the wire shapes of Ollama's embedding API as embed-stack
// serves it, so that clients written for Ollama (its Python and JavaScript
// libraries, LangChain's and LlamaIndex's Ollama embeddings, Chroma's
// OllamaEmbeddingFunction, Open WebUI) work unchanged: POST /api/embed, the legacy
// POST /api/embeddings, and the probes GET /api/tags, GET /api/version and POST
// /api/show. The shapes and the wording of decoding errors follow Ollama v0.17.4
// (api/types.go and server/routes.go there).
//
// It knows JSON and nothing else: not gin, not which HTTP status an error maps to
// (package server owns that), not how vectors are made (package routing).
package ollamaapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"time"
)

// Version is the Ollama release whose API this package follows; GET /api/version
// reports it, since clients that check a version compare it with Ollama's.
const Version = "0.17.4"

// ErrorBody is Ollama's error answer: {"error": "..."}.
type ErrorBody struct {
	Error string `json:"error"`
}

// DecodeError is a body Ollama refuses with 400; Message is Ollama's wording.
type DecodeError struct{ Message string }

func (e *DecodeError) Error() string { return e.Message }

// ErrModelRequired is a request that names no model: Ollama answers it 400 "model
// is required" on every route.
var ErrModelRequired = errors.New("model is required")

// EmbedRequest is the body of POST /api/embed. The type carries Ollama's name
// and fields so that a field of the wrong type is refused in Ollama's words
// ("json: cannot unmarshal number into Go struct field EmbedRequest.model of type
// string"). KeepAlive and Options are accepted and checked, then ignored: a
// model's keep-alive is serve's --keep-alive, and the options Ollama reads
// (num_ctx, num_thread, ...) size its own runner, which here is fixed at start.
type EmbedRequest struct {
	Model      string         `json:"model"`
	Input      any            `json:"input"`
	KeepAlive  *Duration      `json:"keep_alive,omitempty"`
	Truncate   *bool          `json:"truncate,omitempty"`
	Dimensions int            `json:"dimensions,omitempty"`
	Options    map[string]any `json:"options"`
}

// Embed is a decoded POST /api/embed request.
type Embed struct {
	Model string
	// Texts are the inputs; none for an absent or empty input, which Ollama answers
	// with an empty list (a client's way to load a model).
	Texts []string
	// Truncate is Ollama's default true: an input over the context is cut at its
	// end. false refuses it.
	Truncate bool
	// Dimensions is the output size; 0 (or anything outside 1..n) = native, as
	// Ollama ignores a dimensions it cannot apply.
	Dimensions int
}

// decode reads body into v as gin's ShouldBindJSON does in Ollama: one JSON value
// with encoding/json's case-insensitive keys, "missing request body" for an empty
// body, encoding/json's message otherwise.
func decode(body []byte, v any) error {
	err := json.NewDecoder(bytes.NewReader(body)).Decode(v)
	switch {
	case errors.Is(err, io.EOF):
		return &DecodeError{Message: "missing request body"}
	case err != nil:
		return &DecodeError{Message: err.Error()}
	}
	return nil
}

// DecodeEmbed parses a POST /api/embed body: input is a string or an array of
// strings; anything else is "invalid input type", as in Ollama.
func DecodeEmbed(body []byte) (*Embed, error) {
	var req EmbedRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	out := &Embed{Model: req.Model, Truncate: req.Truncate == nil || *req.Truncate, Dimensions: req.Dimensions}
	switch in := req.Input.(type) {
	case nil:
	case string:
		if in != "" {
			out.Texts = []string{in}
		}
	case []any:
		out.Texts = make([]string, len(in))
		for i, v := range in {
			s, ok := v.(string)
			if !ok {
				return nil, &DecodeError{Message: "invalid input type"}
			}
			out.Texts[i] = s
		}
	default:
		return nil, &DecodeError{Message: "invalid input type"}
	}
	return out, nil
}

// EmbeddingRequest is the body of the legacy POST /api/embeddings: one prompt.
type EmbeddingRequest struct {
	Model     string         `json:"model"`
	Prompt    string         `json:"prompt"`
	KeepAlive *Duration      `json:"keep_alive,omitempty"`
	Options   map[string]any `json:"options"`
}

// DecodeEmbedding parses a POST /api/embeddings body.
func DecodeEmbedding(body []byte) (*EmbeddingRequest, error) {
	var req EmbeddingRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return &req, nil
}

// Duration is keep_alive: a number of seconds or a Go duration string, checked as
// Ollama checks it.
type Duration struct{ time.Duration }

// UnmarshalJSON accepts what Ollama accepts: a number (seconds; negative = for
// ever) or a duration string ("5m", "-1").
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch t := v.(type) {
	case float64:
		d.Duration = time.Duration(t * float64(time.Second))
		if t < 0 {
			d.Duration = math.MaxInt64
		}
	case string:
		var err error
		if d.Duration, err = time.ParseDuration(t); err != nil {
			return err
		}
		if d.Duration < 0 {
			d.Duration = math.MaxInt64
		}
	default:
		return fmt.Errorf("Unsupported type: '%s'", reflect.TypeOf(v))
	}
	return nil
}

// EmbedResponse is the answer to POST /api/embed. Durations are nanoseconds, as
// Ollama's time.Duration fields marshal.
type EmbedResponse struct {
	Model           string
	Embeddings      [][]float32
	TotalDuration   time.Duration
	LoadDuration    time.Duration
	PromptEvalCount int
}

// AppendJSON appends the answer. An empty answer (no inputs) carries only model
// and embeddings, as Ollama's does.
func (r *EmbedResponse) AppendJSON(dst []byte) []byte {
	model, _ := json.Marshal(r.Model) // a string always marshals
	dst = append(dst, `{"model":`...)
	dst = append(dst, model...)
	dst = append(dst, `,"embeddings":[`...)
	for i, v := range r.Embeddings {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendFloats(dst, v, 32)
	}
	dst = append(dst, ']')
	if len(r.Embeddings) > 0 {
		dst = append(dst, `,"total_duration":`...)
		dst = strconv.AppendInt(dst, int64(r.TotalDuration), 10)
		dst = append(dst, `,"load_duration":`...)
		dst = strconv.AppendInt(dst, int64(r.LoadDuration), 10)
		dst = append(dst, `,"prompt_eval_count":`...)
		dst = strconv.AppendInt(dst, int64(r.PromptEvalCount), 10)
	}
	return append(dst, '}')
}

// AppendEmbedding appends the legacy answer {"embedding":[...]}: Ollama widens each
// float32 to float64 there, so the numbers are written at float64 precision (the
// same values).
func AppendEmbedding(dst []byte, v []float32) []byte {
	dst = append(dst, `{"embedding":`...)
	dst = appendFloats(dst, v, 64)
	return append(dst, '}')
}

func appendFloats(dst []byte, v []float32, bits int) []byte {
	dst = append(dst, '[')
	for i, f := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendFloat(dst, float64(f), 'g', -1, bits)
	}
	return append(dst, ']')
}

// ModelDetails is the "details" object of /api/tags and /api/show.
type ModelDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ListModel is one model of GET /api/tags.
type ListModel struct {
	Name       string       `json:"name"`
	Model      string       `json:"model"`
	ModifiedAt time.Time    `json:"modified_at"`
	Size       int64        `json:"size"`
	Digest     string       `json:"digest"`
	Details    ModelDetails `json:"details"`
}

// ListResponse is the answer to GET /api/tags.
type ListResponse struct {
	Models []ListModel `json:"models"`
}

// ShowRequest is the body of POST /api/show; Name is its deprecated spelling of
// Model. System, Template, Verbose and Options are accepted and ignored.
type ShowRequest struct {
	Model    string         `json:"model"`
	System   string         `json:"system"`
	Template string         `json:"template"`
	Verbose  bool           `json:"verbose"`
	Options  map[string]any `json:"options"`
	Name     string         `json:"name"`
}

// DecodeShow parses a POST /api/show body and returns the model it names.
func DecodeShow(body []byte) (string, error) {
	var req ShowRequest
	if err := decode(body, &req); err != nil {
		return "", err
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if req.Model == "" {
		return "", ErrModelRequired
	}
	return req.Model, nil
}

// ShowResponse is the answer to POST /api/show, as far as embedding clients read
// it: the details, the GGUF facts under Ollama's model_info keys
// ("general.architecture", "qwen3.context_length", "qwen3.embedding_length", ...)
// and the capabilities (["embedding"]).
type ShowResponse struct {
	Details      ModelDetails   `json:"details"`
	ModelInfo    map[string]any `json:"model_info"`
	Capabilities []string       `json:"capabilities"`
	ModifiedAt   time.Time      `json:"modified_at"`
}

// VersionResponse is the answer to GET /api/version.
type VersionResponse struct {
	Version string `json:"version"`
}

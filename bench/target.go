package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"time"
)

// Target embeds inputs. Implementations are safe for concurrent use.
type Target interface {
	// Embed embeds inputs in one call (one HTTP request for a server) and reports
	// what came back. Vectors are decoded only when vectors is set: a timed request
	// reads and parses the whole response but leaves the floats alone, so the
	// client's own work stays small on a machine whose cores the server needs.
	Embed(ctx context.Context, inputs []Input, vectors bool) Outcome
}

// Outcome is what one Embed call returned.
type Outcome struct {
	// Status is the HTTP status; the floor reports 200, or 0 with Err set.
	Status int
	// Tokens is the number of tokens the target says it embedded (usage.prompt_tokens).
	Tokens int
	// CachedTokens is how many of them it says it answered from a cache
	// (usage.prompt_tokens_details.cached_tokens, as embed-stack's --cache-size
	// reports them; 0 where absent).
	CachedTokens int
	// Vectors in input order, when asked for.
	Vectors [][]float32
	// Err is a transport failure, an error body, or a malformed response.
	Err error
	// Elapsed is the wall time of the call, response body read included.
	Elapsed time.Duration
}

// Embedder is the engine the floor runs: token ids in, one vector per sequence out
// (backends/llama.Engine satisfies it).
type Embedder interface {
	Embed(ctx context.Context, seqs [][]int32) ([][]float32, error)
}

// Floor runs inputs' token ids straight through an engine in this process: no HTTP,
// no tokenizer, no worker hop. It is what every server figure is a ratio to.
type Floor struct {
	Engine Embedder
}

// Embed implements Target.
func (f *Floor) Embed(ctx context.Context, inputs []Input, vectors bool) Outcome {
	seqs := make([][]int32, len(inputs))
	tokens := 0
	for i, in := range inputs {
		seqs[i] = in.Tokens
		tokens += len(in.Tokens)
	}
	start := time.Now()
	vs, err := f.Engine.Embed(ctx, seqs)
	o := Outcome{Elapsed: time.Since(start)}
	if err != nil {
		o.Err = fmt.Errorf("floor: %w", err)
		return o
	}
	o.Status, o.Tokens = http.StatusOK, tokens
	if vectors {
		o.Vectors = vs
	}
	return o
}

// Server is an OpenAI-compatible embeddings endpoint.
type Server struct {
	// BaseURL is the API base as the OpenAI SDKs take it, e.g.
	// http://127.0.0.1:8080/v1; requests go to BaseURL + "/embeddings".
	BaseURL string
	// Model is the model name sent with each request.
	Model string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// Encoding is the encoding_format asked for: "base64" (the default, what the
	// official node SDK asks for) or "float".
	Encoding string
	// Client is the HTTP client; nil means NewClient().
	Client *http.Client
}

// NewClient returns an HTTP client that keeps enough idle connections for the
// largest concurrency level, so timed requests never pay a TCP handshake.
func NewClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil, // a benchmark of a local server must not go through a proxy
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     5 * time.Minute,
	}}
}

type embeddingsRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format,omitempty"`
}

type embeddingsResponse struct {
	Data []struct {
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// Embed implements Target.
func (s *Server) Embed(ctx context.Context, inputs []Input, vectors bool) Outcome {
	texts := make([]string, len(inputs))
	for i, in := range inputs {
		texts[i] = in.Text
	}
	enc := s.Encoding
	if enc == "" {
		enc = "base64"
	}
	body, err := json.Marshal(embeddingsRequest{Model: s.Model, Input: texts, EncodingFormat: enc})
	if err != nil {
		return Outcome{Err: fmt.Errorf("encode request: %w", err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.BaseURL, "/")+"/embeddings", bytes.NewReader(body))
	if err != nil {
		return Outcome{Err: fmt.Errorf("build request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	if s.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Outcome{Err: err, Elapsed: time.Since(start)}
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	o := Outcome{Status: resp.StatusCode, Elapsed: time.Since(start)}
	if err != nil {
		o.Err = fmt.Errorf("read response: %w", err)
		return o
	}
	if resp.StatusCode != http.StatusOK {
		o.Err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, clip(string(raw), 300))
		return o
	}
	var r embeddingsResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		o.Err = fmt.Errorf("decode response: %w", err)
		return o
	}
	o.Tokens, o.CachedTokens = r.Usage.PromptTokens, r.Usage.Details.CachedTokens
	if len(r.Data) != len(inputs) {
		o.Err = fmt.Errorf("%d embeddings for %d inputs", len(r.Data), len(inputs))
		return o
	}
	if !vectors {
		return o
	}
	o.Vectors = make([][]float32, len(inputs))
	for _, d := range r.Data {
		if d.Index < 0 || d.Index >= len(inputs) || o.Vectors[d.Index] != nil {
			o.Err = fmt.Errorf("embedding index %d is out of range or repeated", d.Index)
			return o
		}
		v, err := decodeEmbedding(d.Embedding)
		if err != nil {
			o.Err = fmt.Errorf("embedding %d: %w", d.Index, err)
			return o
		}
		o.Vectors[d.Index] = v
	}
	return o
}

// decodeEmbedding reads an embedding as a JSON array of numbers or as a base64
// string of little-endian float32s.
func decodeEmbedding(raw json.RawMessage) ([]float32, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("base64: %w", err)
		}
		if len(b)%4 != 0 {
			return nil, fmt.Errorf("base64 holds %d bytes, not a whole number of float32s", len(b))
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, errors.New("neither an array of numbers nor a base64 string")
	}
	return v, nil
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

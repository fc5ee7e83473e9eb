package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// vectors32 decodes the vectors of an answer at float32, the precision the server
// computes in: two answers with equal vectors32 carry the same bits.
func vectors32(t *testing.T, r httpResult, pick func(raw []byte) ([][]float32, error)) [][]float32 {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, body %s", r.status, truncate(r.body))
	}
	v, err := pick(r.body)
	if err != nil {
		t.Fatalf("decode %s: %v", truncate(r.body), err)
	}
	return v
}

func openAIVectors(raw []byte) ([][]float32, error) {
	var out struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	err := json.Unmarshal(raw, &out)
	v := make([][]float32, len(out.Data))
	for i, d := range out.Data {
		v[i] = d.Embedding
	}
	return v, err
}

func ollamaVectors(raw []byte) ([][]float32, error) {
	var out struct {
		Embeddings [][]float32 `json:"embeddings"`
	}
	err := json.Unmarshal(raw, &out)
	return out.Embeddings, err
}

func ollamaLegacyVector(raw []byte) ([][]float32, error) {
	var out struct {
		Embedding []float64 `json:"embedding"` // Ollama widens to float64
	}
	err := json.Unmarshal(raw, &out)
	v := make([]float32, len(out.Embedding))
	for i, x := range out.Embedding {
		v[i] = float32(x)
		if float64(v[i]) != x {
			return nil, &json.UnmarshalTypeError{Value: "a float64 that is not a float32"}
		}
	}
	return [][]float32{v}, err
}

func teiVectors(raw []byte) ([][]float32, error) {
	var out [][]float32
	return out, json.Unmarshal(raw, &out)
}

// loose decodes the fields of v that an answer carries, ignoring the others.
func loose(t *testing.T, r httpResult, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", truncate(r.body), err)
	}
}

func requireSameBits(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d vectors, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("%s: vector %d differs from /v1/embeddings' (max |Δ| %g)", what, i, maxAbsDiff(f64(got[i]), f64(want[i])))
		}
	}
}

// Ollama's and TEI's routes give the vectors of /v1/embeddings for the same texts,
// bit for bit: they are thin handlers over the same routing call.
func TestDialectsSameVectors(t *testing.T) {
	s := defaultServer(t)
	texts := []string{"The capital of China is Beijing.", "Gravity is a force that attracts two bodies towards each other.", "naïve café ☕"}
	docs := vectors32(t, s.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts, "encoding_format": "float"}, nil), openAIVectors)
	queries := vectors32(t, s.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts, "input_type": "query"}, nil), openAIVectors)
	small := vectors32(t, s.do(t, "POST", "/v1/embeddings", map[string]any{"input": texts, "dimensions": 32}, nil), openAIVectors)

	r := s.do(t, "POST", "/api/embed", map[string]any{"model": "nomic-embed-text", "input": texts}, nil)
	requireSameBits(t, "POST /api/embed", vectors32(t, r, ollamaVectors), docs)
	var meta struct {
		Model           string `json:"model"`
		TotalDuration   int64  `json:"total_duration"`
		LoadDuration    int64  `json:"load_duration"`
		PromptEvalCount int    `json:"prompt_eval_count"`
	}
	loose(t, r, &meta)
	usage := s.rawEmbed(t, map[string]any{"input": texts}, nil).Usage.PromptTokens
	if meta.Model != "nomic-embed-text" || meta.PromptEvalCount != usage || meta.TotalDuration <= 0 || meta.LoadDuration <= 0 || meta.LoadDuration > meta.TotalDuration {
		t.Errorf("POST /api/embed: %+v; want the model echoed, prompt_eval_count %d (usage), 0 < load_duration <= total_duration", meta, usage)
	}
	requireSameBits(t, "POST /api/embed, model suffix :query",
		vectors32(t, s.do(t, "POST", "/api/embed", map[string]any{"model": "x:query", "input": texts}, nil), ollamaVectors), queries)
	requireSameBits(t, "POST /api/embed, dimensions 32",
		vectors32(t, s.do(t, "POST", "/api/embed", map[string]any{"model": "m", "input": texts, "dimensions": 32}, nil), ollamaVectors), small)
	for i, text := range texts {
		requireSameBits(t, "POST /api/embeddings",
			vectors32(t, s.do(t, "POST", "/api/embeddings", map[string]any{"model": "m", "prompt": text}, nil), ollamaLegacyVector), docs[i:i+1])
	}

	for _, path := range []string{"/embed", "/"} {
		requireSameBits(t, "POST "+path+" (TEI)", vectors32(t, s.do(t, "POST", path, map[string]any{"inputs": texts}, nil), teiVectors), docs)
		requireSameBits(t, "POST "+path+" (TEI), one string", vectors32(t, s.do(t, "POST", path, map[string]any{"inputs": texts[0]}, nil), teiVectors), docs[:1])
		requireSameBits(t, "POST "+path+" (TEI), prompt_name query",
			vectors32(t, s.do(t, "POST", path, map[string]any{"inputs": texts, "prompt_name": "query"}, nil), teiVectors), queries)
		requireSameBits(t, "POST "+path+" (TEI), dimensions 32",
			vectors32(t, s.do(t, "POST", path, map[string]any{"inputs": texts, "dimensions": 32}, nil), teiVectors), small)
		// normalize false: the pooled vectors as they are, which normalise to the
		// unit ones.
		raw := vectors32(t, s.do(t, "POST", path, map[string]any{"inputs": texts, "normalize": false}, nil), teiVectors)
		for i := range raw {
			n := norm(f64(raw[i]))
			if math.Abs(n-1) < 1e-3 {
				t.Fatalf("normalize false: vector %d has norm %g; the tiny model's pooled vectors are not unit length", i, n)
			}
			requireSame(t, "normalize false, normalised", normalized(f64(raw[i])), f64(docs[i]))
		}
	}
	// The native shape is unchanged.
	var native struct {
		Vectors [][]float32 `json:"vectors"`
	}
	s.do(t, "POST", "/embed", map[string]any{"texts": texts}, nil).decode(t, &native)
	requireSameBits(t, "POST /embed (native)", native.Vectors, docs)
}

// Truncation follows each API's default: Ollama cuts the end unless truncate is
// false; TEI refuses unless truncate is true, and truncation_direction left cuts
// the beginning. The cut vectors are /v1/embeddings' with the same truncate.
func TestDialectsTruncation(t *testing.T) {
	s := truncServer(t)
	long := repeatedText(t, 100)
	end := vectors32(t, s.do(t, "POST", "/v1/embeddings", map[string]any{"input": long, "truncate": "end"}, nil), openAIVectors)
	start := vectors32(t, s.do(t, "POST", "/v1/embeddings", map[string]any{"input": long, "truncate": "start"}, nil), openAIVectors)

	requireSameBits(t, "Ollama's default truncation", vectors32(t, s.do(t, "POST", "/api/embed", map[string]any{"model": "m", "input": long}, nil), ollamaVectors), end)
	r := s.do(t, "POST", "/api/embed", map[string]any{"model": "m", "input": long, "truncate": false}, nil)
	if r.status != 400 || string(r.body) != `{"error":"the input length exceeds the context length"}` {
		t.Errorf("Ollama, truncate false: %d %s", r.status, r.body)
	}
	r = s.do(t, "POST", "/api/embeddings", map[string]any{"model": "m", "prompt": long}, nil)
	if r.status != 400 || string(r.body) != `{"error":"the input length exceeds the context length"}` {
		t.Errorf("Ollama legacy, over the context: %d %s", r.status, r.body)
	}

	r = s.do(t, "POST", "/embed", map[string]any{"inputs": long}, nil)
	if want := "{\"error\":\"Input validation error: `inputs` must have less than 64 tokens. Given: 101\",\"error_type\":\"Validation\"}"; r.status != 422 || string(r.body) != want {
		t.Errorf("TEI without truncate: %d %s\nwant 422 %s", r.status, r.body, want)
	}
	requireSameBits(t, "TEI truncate", vectors32(t, s.do(t, "POST", "/embed", map[string]any{"inputs": long, "truncate": true}, nil), teiVectors), end)
	requireSameBits(t, "TEI truncate left",
		vectors32(t, s.do(t, "POST", "/", map[string]any{"inputs": long, "truncate": true, "truncation_direction": "left"}, nil), teiVectors), start)
}

// Bad input gets each API's error body and status from the real binary.
func TestDialectsErrors(t *testing.T) {
	s := defaultServer(t)
	for _, c := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/api/embed", `{"input":"a"}`, 400, `{"error":"model is required"}`},
		{"/api/embed", `{"model":"m","input":[1]}`, 400, `{"error":"invalid input type"}`},
		{"/api/embed", ``, 400, `{"error":"missing request body"}`},
		{"/api/embed", `{"model":"m","input":["a",""]}`, 400, `{"error":"input 1 is an empty string; every input must hold text."}`},
		{"/api/embeddings", `{"model":"m","prompt":""}`, 200, `{"embedding":[]}`},
		{"/api/embed", `{"model":"m","input":[]}`, 200, `{"model":"m","embeddings":[]}`},
		{"/embed", `{"inputs":[]}`, 400, "{\"error\":\"`inputs` cannot be empty\",\"error_type\":\"Empty\"}"},
		{"/embed", `{"inputs":["a",""]}`, 400, "{\"error\":\"Input validation error: `inputs` cannot be empty\",\"error_type\":\"Empty\"}"},
		{"/embed", `{"inputs":"a","dimensions":5000}`, 422, "{\"error\":\"Input validation error: `dimensions` should be smaller than the maximum embedding dimension.\",\"error_type\":\"Validation\"}"},
		{"/", `{"inputs":["a"],"prompt_name":"search"}`, 422, "{\"error\":\"Input validation error: `default-prompt-name` is set to `search` but it was not found in the Sentence Transformers prompts. Available prompts: [\\\"query\\\", \\\"document\\\"]\",\"error_type\":\"Validation\"}"},
		{"/", `[1]`, 422, `{"error":"Failed to deserialize the JSON body into the target type: invalid type: array, expected struct EmbedRequest","error_type":"Validation"}`},
		// Per-token embeddings are not computed (docs/api.md): TEI's 424 Backend.
		{"/embed_all", `{"inputs":"a"}`, 424, "{\"error\":\"`embed_all` is not available: embed-stack computes the pooled vector of each input, not every token's; use /embed\",\"error_type\":\"Backend\"}"},
	} {
		r := s.do(t, "POST", c.path, c.body, nil)
		if r.status != c.status || string(r.body) != c.want {
			t.Errorf("POST %s %s: %d %s\nwant %d %s", c.path, c.body, r.status, r.body, c.status, c.want)
		}
	}
}

// The Ollama probes describe the served GGUF: its sha256 (hashed in the
// background at start), size, architecture and weight type.
func TestOllamaProbes(t *testing.T) {
	s := defaultServer(t)
	f, err := os.Open(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	id := s.modelID(t)
	var tags struct {
		Models []struct {
			Name    string `json:"name"`
			Model   string `json:"model"`
			Size    int64  `json:"size"`
			Digest  string `json:"digest"`
			Details struct {
				Format            string `json:"format"`
				Family            string `json:"family"`
				QuantizationLevel string `json:"quantization_level"`
				ParameterSize     string `json:"parameter_size"`
			} `json:"details"`
		} `json:"models"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		loose(t, s.do(t, "GET", "/api/tags", nil, nil), &tags)
		if len(tags.Models) != 3 || tags.Models[0].Digest != "" || time.Now().After(deadline) {
			break
		}
	}
	if len(tags.Models) != 3 || tags.Models[1].Name != id+":query" || tags.Models[2].Name != id+":document" {
		t.Fatalf("/api/tags: %+v; want %s:latest, :query and :document", tags, id)
	}
	m := tags.Models[0]
	if m.Name != id+":latest" || m.Model != m.Name || m.Size != n || m.Digest != digest || m.Details.Format != "gguf" || m.Details.Family != "qwen3" ||
		m.Details.QuantizationLevel != "F16" || m.Details.ParameterSize != "9.81M" {
		t.Errorf("/api/tags: %+v; want %s:latest, %d bytes, sha256 %s, qwen3 F16 9.81M", m, id, n, digest)
	}
	var show struct {
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string       `json:"capabilities"`
	}
	loose(t, s.do(t, "POST", "/api/show", map[string]any{"model": m.Name}, nil), &show)
	if show.ModelInfo["general.architecture"] != "qwen3" || show.ModelInfo["qwen3.embedding_length"] == nil || show.ModelInfo["qwen3.pooling_type"] != 3.0 || !slices.Equal(show.Capabilities, []string{"embedding"}) {
		t.Errorf("/api/show: %+v", show)
	}
	if r := s.do(t, "GET", "/api/version", nil, nil); string(r.body) != `{"version":"0.17.4"}` {
		t.Errorf("/api/version: %s", r.body)
	}
	// The ollama CLI's heartbeat, before `ollama list`.
	if r := s.do(t, "GET", "/", nil, nil); r.status != 200 || string(r.body) != "Ollama is running" {
		t.Errorf("GET /: %d %s", r.status, r.body)
	}
	if r := s.do(t, "HEAD", "/", nil, nil); r.status != 200 {
		t.Errorf("HEAD /: %d", r.status)
	}
	info := string(s.do(t, "GET", "/info", nil, nil).body)
	for _, want := range []string{`"model_id":"` + id + `"`, `"model_sha":"` + digest + `"`, `"model_dtype":"float16"`, `"model_type":{"embedding":{"pooling":"last_token"}}`} {
		if !strings.Contains(info, want) {
			t.Errorf("/info lacks %s: %s", want, info)
		}
	}
}

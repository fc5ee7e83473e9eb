package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// TestHealthAndReady: both answer 200 with their exact bodies once the server is ready.
func TestHealthAndReady(t *testing.T) {
	s := defaultServer(t)
	for _, tc := range []struct{ path, want string }{
		{"/health", "ok"},
		{"/ready", "ready"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			r := s.do(t, http.MethodGet, tc.path, nil, nil)
			if r.status != http.StatusOK {
				t.Fatalf("status %d, want 200: %s", r.status, truncate(r.body))
			}
			// /health also says where vectors are computed (the warm worker's device).
			var body struct {
				Status string `json:"status"`
				Device *struct {
					Name        string `json:"name"`
					Description string `json:"description"`
					Backend     string `json:"backend"`
					GPU         bool   `json:"gpu"`
					GPULayers   int    `json:"gpu_layers"`
					MemoryTotal int64  `json:"memory_total_bytes"`
					MemoryFree  int64  `json:"memory_free_bytes"`
					Note        string `json:"note"`
					// The CPU kernels the worker runs and why (issue 23).
					CPUVariant     string   `json:"cpu_variant"`
					CPUVariantNote string   `json:"cpu_variant_note"`
					CPUFeatures    []string `json:"cpu_features"`
					CPUVendor      string   `json:"cpu_vendor"`
					// embed-stack's own CPU kernels, when registered (--cpu-accel).
					CPUAccel string `json:"cpu_accel"`
					// Whether those kernels multiply BF16 weights.
					CPUAccelBF16 bool   `json:"cpu_accel_bf16"`
					Warning      string `json:"warning"`
				} `json:"device"`
			}
			r.decode(t, &body)
			if body.Status != tc.want {
				t.Errorf("status field %q, want %q", body.Status, tc.want)
			}
			switch d := body.Device; {
			case tc.path == "/ready" && d != nil:
				t.Errorf("/ready reports a device: %+v", d)
			case tc.path == "/health" && (d == nil || d.Name == "" || d.Backend == "" || d.MemoryTotal <= 0 || d.MemoryFree > d.MemoryTotal || d.GPU != (d.GPULayers > 0) ||
				d.CPUVariant == "" || d.CPUVariantNote == "" || d.CPUAccelBF16 != strings.HasSuffix(d.CPUAccel, ", BF16)")):
				t.Errorf("/health device = %+v, want a named device with its memory", d)
			}
		})
	}
}

// TestModels: GET /v1/models is OpenAI's list shape holding the configured id, which
// GET /v1/models/{id} returns on its own; go-openai reads both.
func TestModels(t *testing.T) {
	s := defaultServer(t)
	r := s.do(t, http.MethodGet, "/v1/models", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, truncate(r.body))
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		Root    string `json:"root"`
		Task    string `json:"task"`
		// What the model is (issue 25).
		Architecture  string `json:"architecture"`
		Pooling       string `json:"pooling"`
		Dimensions    int    `json:"dimensions"`
		ContextLength int    `json:"context_length"`
		Tokenizer     string `json:"tokenizer"`
		// The weights in use (issue 23).
		Weights              string `json:"weights"`
		WeightsConvertedFrom string `json:"weights_converted_from"`
	}
	var list struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}
	r.decode(t, &list)
	if list.Object != "list" || len(list.Data) == 0 {
		t.Fatalf("object %q with %d models, want list with at least 1", list.Object, len(list.Data))
	}
	first := list.Data[0]
	now := time.Now().Unix()
	if first.ID == "" || first.Object != "model" || first.OwnedBy == "" || first.Created <= 0 || first.Created > now || first.Root != first.ID || first.Task != "embedding" ||
		first.Architecture != "qwen3" || first.Pooling != "last" || first.Dimensions != 64 || first.ContextLength != 32768 || first.Tokenizer != "BPE" {
		t.Errorf("model entry %+v: want a non-empty id, object model, an owner, a past creation time, itself as root, task embedding, and the tiny Qwen3's architecture, pooling, dimensions, context and tokenizer", first)
	}

	got, err := s.client(nil).GetModel(ctx(t), first.ID)
	if err != nil {
		t.Fatalf("go-openai GetModel(%q): %v", first.ID, err)
	}
	if got.ID != first.ID || got.Object != "model" || got.CreatedAt != first.Created || got.OwnedBy != first.OwnedBy {
		t.Errorf("GetModel = %+v, want %+v", got, first)
	}
	ms, err := s.client(nil).ListModels(ctx(t))
	if err != nil {
		t.Fatalf("go-openai ListModels: %v", err)
	}
	if len(ms.Models) != len(list.Data) || ms.Models[0].ID != first.ID {
		t.Errorf("ListModels = %+v, want ids of %+v", ms.Models, list.Data)
	}
	// Without --strict-model /v1/embeddings takes any name, and so does GET
	// /v1/models/{id}: a client that checks its model first (the OpenAI SDKs'
	// models.retrieve) is not refused one it can embed with (issue 17).
	for _, name := range []string{"text-embedding-3-small", first.ID + ":query"} {
		if got, err := s.client(nil).GetModel(ctx(t), name); err != nil || got.ID != name || got.Object != "model" {
			t.Errorf("go-openai GetModel(%q) = %+v, %v; want that model", name, got, err)
		}
		// ... but its root says which model answers: no model of that name was loaded
		// (issue 27).
		var m model
		s.do(t, http.MethodGet, "/v1/models/"+name, nil, nil).decode(t, &m)
		if m.ID != name || m.Root != first.ID || m.Task != "embedding" {
			t.Errorf("GET /v1/models/%s = %+v, want id %s, root %s, task embedding", name, m, name, first.ID)
		}
	}
}

// TestNativeEmbed: POST /embed gives the same normalised vectors as /v1/embeddings
// for the same input type and instruction.
func TestNativeEmbed(t *testing.T) {
	s := defaultServer(t)
	texts := []string{"native endpoint", "second text"}
	const task = "Find the matching recipe"
	tests := []struct {
		name string
		body map[string]any
		want func(t *testing.T, text string) expectation
	}{
		{"document", map[string]any{"texts": texts, "input_type": "document"}, expectDocument},
		{"default is document", map[string]any{"texts": texts}, expectDocument},
		{"query", map[string]any{"texts": texts, "input_type": "query"},
			func(t *testing.T, text string) expectation { return expectQuery(t, defaultTask, text) }},
		{"query with instruction", map[string]any{"texts": texts, "input_type": "query", "instruction": task},
			func(t *testing.T, text string) expectation { return expectQuery(t, task, text) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(t, http.MethodPost, "/embed", tc.body, nil)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, truncate(r.body))
			}
			var got struct {
				Vectors [][]float64 `json:"vectors"`
			}
			r.decode(t, &got)
			if len(got.Vectors) != len(texts) {
				t.Fatalf("%d vectors, want %d", len(got.Vectors), len(texts))
			}
			body := map[string]any{"input": texts, "model": "m"}
			for k, v := range tc.body {
				if k != "texts" {
					body[k] = v
				}
			}
			openaiResp := s.rawEmbed(t, body, nil)
			for i, text := range texts {
				requireReference(t, fmt.Sprintf("vectors[%d]", i), got.Vectors[i], tc.want(t, text))
				requireSame(t, fmt.Sprintf("vectors[%d] vs /v1/embeddings", i), got.Vectors[i], openaiResp.Data[i].Embedding)
			}
		})
	}
	t.Run("empty texts", func(t *testing.T) {
		// The error names /embed's own field, not /v1/embeddings' input.
		env := requireErrorEnvelope(t, s.do(t, http.MethodPost, "/embed", map[string]any{"texts": []string{}}, nil), http.StatusBadRequest)
		requireParam(t, env, "texts")
	})
}

// TestEmbeddingsWithoutV1: POST /embeddings (llama.cpp's server's and Infinity's
// path) is /v1/embeddings: the same body answers the same bytes.
func TestEmbeddingsWithoutV1(t *testing.T) {
	s := defaultServer(t)
	body := map[string]any{"model": "m", "input": []string{"no prefix", "second"}, "encoding_format": "base64"}
	a, b := s.do(t, http.MethodPost, "/v1/embeddings", body, nil), s.do(t, http.MethodPost, "/embeddings", body, nil)
	if a.status != http.StatusOK || b.status != http.StatusOK || !bytes.Equal(a.body, b.body) {
		t.Fatalf("/v1/embeddings %d %s\n/embeddings %d %s", a.status, truncate(a.body), b.status, truncate(b.body))
	}
}

// TestTokenize: POST /tokenize shows the ids exactly as they would be embedded (wrapping
// and EOS included), and its count equals /v1/embeddings' usage.
func TestTokenize(t *testing.T) {
	s := defaultServer(t)
	const text = "Tokenize me, please: 東京"
	const task = "Classify the sentiment"
	tests := []struct {
		name string
		body map[string]any
		want string // the wrapped text
	}{
		{"document", map[string]any{"text": text}, text},
		{"query", map[string]any{"text": text, "input_type": "query"}, queryText(defaultTask, text)},
		{"query with instruction", map[string]any{"text": text, "input_type": "query", "instruction": task}, queryText(task, text)},
		{"passage", map[string]any{"text": text, "input_type": "passage"}, text},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(t, http.MethodPost, "/tokenize", tc.body, nil)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, truncate(r.body))
			}
			type result struct {
				IDs   []int32 `json:"ids"`
				Count int     `json:"count"`
			}
			var got struct {
				IDs     []int32  `json:"ids"`
				Count   int      `json:"count"`
				Total   int      `json:"total"`
				Results []result `json:"results"`
			}
			r.decode(t, &got)
			want := append(encode(t, tc.want), eosID)
			if !equalInt32(got.IDs, want) {
				t.Errorf("ids %v\nwant %v", got.IDs, want)
			}
			if got.Count != len(want) || got.Total != len(want) {
				t.Errorf("count %d total %d, want %d", got.Count, got.Total, len(want))
			}
			if len(got.Results) != 1 || !equalInt32(got.Results[0].IDs, want) || got.Results[0].Count != len(want) {
				t.Errorf("results %+v, want one result with the same ids", got.Results)
			}
			body := map[string]any{"input": text, "model": "m"}
			for k, v := range tc.body {
				if k != "text" {
					body[k] = v
				}
			}
			if usage := s.rawEmbed(t, body, nil).Usage; usage.PromptTokens != got.Count {
				t.Errorf("/v1/embeddings usage %d, /tokenize count %d", usage.PromptTokens, got.Count)
			}
		})
	}
	t.Run("several texts", func(t *testing.T) {
		texts := []string{"one", "two words"}
		r := s.do(t, http.MethodPost, "/tokenize", map[string]any{"texts": texts}, nil)
		if r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, truncate(r.body))
		}
		var got struct {
			Total   int `json:"total"`
			Results []struct {
				IDs   []int32 `json:"ids"`
				Count int     `json:"count"`
			} `json:"results"`
		}
		r.decode(t, &got)
		if len(got.Results) != len(texts) {
			t.Fatalf("%d results, want %d", len(got.Results), len(texts))
		}
		total := 0
		for i, text := range texts {
			want := append(encode(t, text), eosID)
			total += len(want)
			if !equalInt32(got.Results[i].IDs, want) || got.Results[i].Count != len(want) {
				t.Errorf("results[%d] = %+v, want ids %v", i, got.Results[i], want)
			}
		}
		if got.Total != total {
			t.Errorf("total %d, want %d", got.Total, total)
		}
	})
	t.Run("NFC", func(t *testing.T) {
		// Qwen's tokenizer normalises to NFC: a decomposed "é" is the composed one.
		ids := func(text string) []int32 {
			r := s.do(t, http.MethodPost, "/tokenize", map[string]any{"text": text}, nil)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, truncate(r.body))
			}
			var got struct {
				IDs []int32 `json:"ids"`
			}
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatal(err)
			}
			return got.IDs
		}
		composed, decomposed := ids("caf\u00e9 na\u00efve"), ids("cafe\u0301 nai\u0308ve")
		want := append(encode(t, "caf\u00e9 na\u00efve"), eosID)
		if !equalInt32(composed, want) || !equalInt32(decomposed, want) {
			t.Errorf("composed %v, decomposed %v, want both %v", composed, decomposed, want)
		}
	})
	t.Run("at the limit", func(t *testing.T) {
		// 32767 tokens + EOS = 32768: the longest input accepted (checked without
		// embedding it, which /tokenize never does).
		r := s.do(t, http.MethodPost, "/tokenize", map[string]any{"text": repeatedText(t, 32767)}, nil)
		if r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, truncate(r.body))
		}
		var got struct {
			Count int `json:"count"`
		}
		if err := json.Unmarshal(r.body, &got); err != nil || got.Count != 32768 {
			t.Errorf("count %d (%v), want 32768", got.Count, err)
		}
	})
	t.Run("over-length", func(t *testing.T) {
		r := s.do(t, http.MethodPost, "/tokenize", map[string]any{"text": repeatedText(t, 32768)}, nil)
		env := requireErrorEnvelope(t, r, http.StatusBadRequest)
		requireParam(t, env, "text")
		if env.Error.Code == nil || *env.Error.Code != codeContextLength {
			t.Errorf("code %s, want %q", strPtr(env.Error.Code), codeContextLength)
		}
	})
}

func equalInt32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestManyInputs: 2048 inputs (the limit) come back complete, in order, each the
// vector of its own text.
func TestManyInputs(t *testing.T) {
	s := defaultServer(t)
	const n = 2048
	texts := make([]string, n)
	for i := range texts {
		texts[i] = "item " + strconv.Itoa(i)
	}
	resp := embed(t, s.client(nil), openai.EmbeddingRequestStrings{Input: texts, Model: "m", EncodingFormat: openai.EmbeddingEncodingFormatBase64})
	if len(resp.Data) != n {
		t.Fatalf("%d vectors, want %d", len(resp.Data), n)
	}
	wantTokens := 0
	for i, text := range texts {
		wantTokens += len(encode(t, text)) + 1
		if resp.Data[i].Index != i {
			t.Fatalf("data[%d].index = %d", i, resp.Data[i].Index)
		}
		// The reference for every 128th input, plus the last: order and batching.
		if i%128 == 0 || i == n-1 {
			requireReference(t, fmt.Sprintf("data[%d]", i), f64(resp.Data[i].Embedding), expectDocument(t, text))
		}
	}
	if resp.Usage.PromptTokens != wantTokens {
		t.Errorf("prompt_tokens %d, want %d", resp.Usage.PromptTokens, wantTokens)
	}
}

// TestConcurrentRequests: requests in flight together each get their own vectors.
func TestConcurrentRequests(t *testing.T) {
	s := defaultServer(t)
	const n = 16
	type result struct {
		i   int
		vec []float64
		err error
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		go func() {
			req := openai.EmbeddingRequestStrings{Input: []string{"concurrent " + strconv.Itoa(i)}, Model: "m"}
			resp, err := s.client(nil).CreateEmbeddings(ctx(t), req)
			if err == nil && len(resp.Data) != 1 {
				err = fmt.Errorf("%d vectors", len(resp.Data))
			}
			if err != nil {
				results <- result{err: fmt.Errorf("request %d: %w", i, err)}
				return
			}
			results <- result{i: i, vec: f64(resp.Data[0].Embedding)}
		}()
	}
	for range n {
		r := <-results
		if r.err != nil {
			t.Error(r.err)
			continue
		}
		requireReference(t, fmt.Sprintf("request %d", r.i), r.vec, expectDocument(t, "concurrent "+strconv.Itoa(r.i)))
	}
}

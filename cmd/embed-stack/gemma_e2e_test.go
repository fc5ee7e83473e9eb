package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// hfSPMBPEIDs returns Hugging Face's ids for text under the SentencePiece BPE test
// vocabulary that gemma-embedding-tiny.gguf carries, from the parity file
// tools/hf-tokenizers/spm_bpe.py wrote (without special tokens).
func hfSPMBPEIDs(t *testing.T, text string) []int32 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(e2e.RepoRoot(t), "tokenizer", "testdata", "parity-spm-bpe.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Entries []struct {
			Text string  `json:"text"`
			IDs  []int32 `json:"ids"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	for _, e := range p.Entries {
		if e.Text == text {
			return e.IDs
		}
	}
	t.Fatalf("parity-spm-bpe.json has no entry %q", text)
	return nil
}

// TestServeEmbeddingGemma serves the gemma-embedding test model (random weights, the
// SentencePiece BPE test vocabulary written as llama.cpp writes EmbeddingGemma's)
// through the real binary: /info names its architecture, pooling, tokenizer, special
// tokens and EmbeddingGemma's prompts, recognised from the architecture; /tokenize
// gives <bos>, Hugging Face's ids of the prompted text, <eos>; /v1/embeddings gives
// unit vectors whose Matryoshka prefixes (dimensions) are the full vector's first
// values re-normalised, and a query differs from a document of the same text.
func TestServeEmbeddingGemma(t *testing.T) {
	s := serveWith(t, "--model", "gemma="+encoderModel(t, "models/gemma-embedding-tiny.gguf"))

	got := infoModels(t, s.URL)
	want := `gemma gemma-embedding mean ctx=512 SentencePiece BPE "<bos> and <eos>" dim=64 max=512 prompts=gemma "task: {instruction} | query: " "title: none | text: " "search result"`
	if len(got) != 1 || got[0] != want {
		t.Errorf("GET /info:\n got %q\nwant %s", got, want)
	}

	tokenize := func(body map[string]any) []int32 {
		t.Helper()
		b, _ := json.Marshal(body)
		code, raw := call(t, s.URL+"/tokenize", string(b))
		if code != 200 {
			t.Fatalf("POST /tokenize %s: %d %s", b, code, raw)
		}
		var out struct {
			IDs []int32 `json:"ids"`
		}
		if err := json.Unmarshal([]byte(raw), &out); err != nil {
			t.Fatal(err)
		}
		return out.IDs
	}
	const bos, eos = 2, 1
	framed := func(text string) []int32 {
		return slices.Concat([]int32{bos}, hfSPMBPEIDs(t, text), []int32{eos})
	}
	const query, doc = "What is the speed of light?", "Light travels at about 300,000 km per second in a vacuum."
	for _, tc := range []struct {
		body map[string]any
		want []int32
	}{
		{map[string]any{"model": "gemma", "text": query, "input_type": "query"}, framed("task: search result | query: " + query)},
		{map[string]any{"model": "gemma", "text": query, "input_type": "query", "instruction": "clustering"}, framed("task: clustering | query: " + query)},
		{map[string]any{"model": "gemma", "text": doc, "input_type": "document"}, framed("title: none | text: " + doc)},
	} {
		if ids := tokenize(tc.body); !slices.Equal(ids, tc.want) {
			t.Errorf("POST /tokenize %v:\n got %v\nwant %v (<bos>, HF's ids, <eos>)", tc.body, ids, tc.want)
		}
	}

	full := e2e.Embeddings(t, s.URL, map[string]any{"model": "gemma", "input": query, "input_type": "query"})[0]
	if len(full) != 64 {
		t.Fatalf("/v1/embeddings: %d dimensions, want 64", len(full))
	}
	if n := math.Sqrt(dot(full, full)); math.Abs(n-1) > 1e-6 {
		t.Errorf("the vector has norm %.9f, want 1", n)
	}
	for _, dims := range []int{32, 48} {
		cut := e2e.Embeddings(t, s.URL, map[string]any{"model": "gemma", "input": query, "input_type": "query", "dimensions": dims})[0]
		prefix := full[:dims]
		norm := math.Sqrt(dot(prefix, prefix))
		if len(cut) != dims {
			t.Fatalf("dimensions %d: %d values", dims, len(cut))
		}
		for i := range cut {
			if math.Abs(cut[i]-prefix[i]/norm) > 1e-6 {
				t.Fatalf("dimensions %d: value %d is %.9f, want the full vector's %.9f re-normalised (%.9f)", dims, i, cut[i], prefix[i], prefix[i]/norm)
			}
		}
	}
	asDoc := e2e.Embeddings(t, s.URL, map[string]any{"model": "gemma", "input": query, "input_type": "document"})[0]
	if c := e2e.Cosine(full, asDoc); c > 0.9999 {
		t.Errorf("a query and a document of the same text give cosine %.6f: the prompts were not applied", c)
	}
}

package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// crossEncoderPairs is backends/llama/testdata/crossencoder-reference.json
// (tools/hf-tokenizers/crossencoder_reference.py): query-document pairs, HF's ids
// of each pair ([CLS] query [SEP] document [SEP]) and the logit of an independent
// float64 BertForSequenceClassification forward pass of models/bert-reranker-tiny.gguf.
type crossEncoderPairs struct {
	Pairs []struct {
		Query    string  `json:"query"`
		Document string  `json:"document"`
		IDs      []int32 `json:"ids"`
		Logit    float64 `json:"logit"`
	} `json:"pairs"`
}

// TestServeCrossEncoder serves the random-weight cross-encoders (BERT with
// MiniLM's WordPiece and two token types; XLM-R's Unigram, one token type) through
// the real binary, beside an embedding model, and holds every rerank API to the
// float64 references: per query, /v1/rerank's relevance_score within 0.0025 of
// sigmoid(logit), usage counting exactly HF's tokens of every pair, the order the
// reference's (up to pairs whose reference logits are within twice the tolerance),
// top_n and return_documents; TEI's /rerank raw_scores within 0.01 of the logit;
// /info naming the classifier head; an instruction refused with 400.
func TestServeCrossEncoder(t *testing.T) {
	bert, xlmr := encoderModel(t, "models/bert-reranker-tiny.gguf"), encoderModel(t, "models/xlmr-reranker-tiny.gguf")
	mini := encoderModel(t, "models/bert-tiny.gguf")
	// --weights file: the references are of the files' weights, which --weights
	// auto would convert to BF16 on a CPU with AVX-512 BF16 (scores then move by
	// up to 0.004, logits by 0.03, beyond these tolerances).
	s := serveWith(t, "--model", "ce="+bert, "--model", "xlmr="+xlmr, "--model", "mini="+mini, "--weights", "file")
	for _, tc := range []struct{ model, reference string }{
		{"ce", "crossencoder-reference.json"},
		{"xlmr", "crossencoder-xlmr-reference.json"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(e2e.RepoRoot(t), "backends", "llama", "testdata", tc.reference))
			if err != nil {
				t.Fatal(err)
			}
			var ref crossEncoderPairs
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			checkCrossEncoder(t, s, tc.model, tc.model == "ce", ref)
		})
	}

	code, body := call(t, s.URL+"/v1/rerank", `{"model":"ce","query":"q","documents":["d"],"instruction":"judge"}`)
	want := `{"error":{"message":"This reranker is a cross-encoder, which scores the query and the document as they are and takes no instruction; omit 'instruction'.","type":"invalid_request_error","param":"instruction","code":"invalid_value"}}`
	if code != 400 || body != want {
		t.Errorf("an instruction to the cross-encoder: %d %s\nwant 400 %s", code, body, want)
	}
	code, body = call(t, s.URL+"/v1/embeddings", `{"model":"ce","input":"q"}`)
	if code != 400 || !json.Valid([]byte(body)) || !strings.Contains(body, `"code":"model_task_mismatch"`) {
		t.Errorf("an embedding request to the cross-encoder: %d %s; want 400 model_task_mismatch", code, body)
	}
}

// checkCrossEncoder holds the served cross-encoder model to the reference ref (see
// TestServeCrossEncoder).
// TEI's /rerank, which names no model, is checked on the first reranker served
// only (first), which it answers with.
func checkCrossEncoder(t *testing.T, s *e2e.Server, model string, first bool, ref crossEncoderPairs) {
	code, body := call(t, s.URL+"/info", "")
	if code != 200 {
		t.Fatalf("GET /info: %d %s", code, body)
	}
	type infoModel struct {
		ID       string `json:"id"`
		Task     string `json:"task"`
		Reranker *struct {
			Head   string   `json:"head"`
			Labels []string `json:"labels"`
		} `json:"reranker"`
	}
	var info struct {
		Models []infoModel `json:"models"`
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	at := slices.IndexFunc(info.Models, func(m infoModel) bool { return m.ID == model })
	if at < 0 {
		t.Fatalf("/info lists no model %s: %s", model, body)
	}
	if m := info.Models[at]; m.Task != "rerank" || m.Reranker == nil || m.Reranker.Head != "classifier" || !slices.Equal(m.Reranker.Labels, []string{"relevance"}) {
		t.Errorf("/info's %s: %+v; want a rerank model with the classifier head labelled relevance (%s)", model, m, body)
	}

	byQuery := map[string][]int{}
	var queries []string
	for i, p := range ref.Pairs {
		if byQuery[p.Query] == nil {
			queries = append(queries, p.Query)
		}
		byQuery[p.Query] = append(byQuery[p.Query], i)
	}
	const tol, rawTol = 0.0025, 0.01
	worst := 0.0
	for _, q := range queries {
		idx := byQuery[q]
		docs := make([]string, len(idx))
		tokens := 0
		for j, i := range idx {
			docs[j] = ref.Pairs[i].Document
			tokens += len(ref.Pairs[i].IDs)
		}
		req, _ := json.Marshal(map[string]any{"model": model, "query": q, "documents": docs, "return_documents": true})
		code, body := call(t, s.URL+"/v1/rerank", string(req))
		if code != 200 {
			t.Fatalf("POST /v1/rerank: %d %s", code, body)
		}
		var res struct {
			Model   string `json:"model"`
			Results []struct {
				Index    int     `json:"index"`
				Score    float64 `json:"relevance_score"`
				Document struct {
					Text string `json:"text"`
				} `json:"document"`
			} `json:"results"`
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Results) != len(docs) || res.Model != model {
			t.Fatalf("query %q: model %q, %d results; want %s, %d", q, res.Model, len(res.Results), model, len(docs))
		}
		if res.Usage.TotalTokens != tokens {
			t.Errorf("query %q: usage %d tokens; HF's pairs ([CLS] query [SEP] document [SEP]) make %d", q, res.Usage.TotalTokens, tokens)
		}
		for k, r := range res.Results {
			p := ref.Pairs[idx[r.Index]]
			want := 1 / (1 + math.Exp(-p.Logit))
			d := math.Abs(r.Score - want)
			worst = max(worst, d)
			if d > tol {
				t.Errorf("query %q, document %d %q: relevance_score %.6f, reference sigmoid(%.6f) = %.6f (difference %.2g > %g)", q, r.Index, p.Document, r.Score, p.Logit, want, d, tol)
			}
			if r.Document.Text != p.Document {
				t.Errorf("query %q, result %d: document %q, want %q", q, k, r.Document.Text, p.Document)
			}
			if k > 0 {
				prev := ref.Pairs[idx[res.Results[k-1].Index]].Logit
				if prev < p.Logit-2*rawTol {
					t.Errorf("query %q: document %d (reference logit %.4f) ranked above document %d (%.4f)", q, res.Results[k-1].Index, prev, r.Index, p.Logit)
				}
			}
		}
		// The reference's best document, by top_n 1.
		best := slices.Clone(idx)
		sort.SliceStable(best, func(a, b int) bool { return ref.Pairs[best[a]].Logit > ref.Pairs[best[b]].Logit })
		req, _ = json.Marshal(map[string]any{"model": model, "query": q, "documents": docs, "top_n": 1})
		if code, body := call(t, s.URL+"/v1/rerank", string(req)); code != 200 {
			t.Errorf("top_n 1: %d %s", code, body)
		} else if err := json.Unmarshal([]byte(body), &res); err != nil || len(res.Results) != 1 || idx[res.Results[0].Index] != best[0] {
			t.Errorf("query %q, top_n 1: %s; want document %d, the reference's best", q, body, slices.Index(idx, best[0]))
		}

		if !first {
			continue
		}
		// TEI's shape, raw scores: the logit.
		req, _ = json.Marshal(map[string]any{"query": q, "texts": docs, "raw_scores": true})
		code, body = call(t, s.URL+"/rerank", string(req))
		if code != 200 {
			t.Fatalf("POST /rerank: %d %s", code, body)
		}
		var tei []struct {
			Index int     `json:"index"`
			Score float64 `json:"score"`
		}
		if err := json.Unmarshal([]byte(body), &tei); err != nil {
			t.Fatal(err)
		}
		for _, r := range tei {
			p := ref.Pairs[idx[r.Index]]
			if d := math.Abs(r.Score - p.Logit); d > rawTol {
				t.Errorf("/rerank raw_scores, query %q, document %d: %.6f, reference logit %.6f (difference %.2g > %g)", q, r.Index, r.Score, p.Logit, d, rawTol)
			}
		}
	}
	t.Logf("%d pairs, %d queries: largest relevance_score difference %.2g (tolerance %g)", len(ref.Pairs), len(queries), worst, tol)
}

// TestServeCrossEncoderArchitectures serves the random-weight cross-encoders of
// the other architectures whose classifier head llama.cpp's rank pooling computes
// (jina-bert-v2 with its one-row classifier and two token types, a
// jina-reranker-v1; neo-bert with the dense layer and classifier), through the real
// binary beside an embedding model, and holds every rerank API to llama.cpp's own
// rank pooling of the same pairs
// (backends/llama/testdata/crossencoder-archs-reference.json, held to llama.cpp by
// TestCrossEncoderArchitecturesReference): as TestServeCrossEncoder, /v1/rerank's
// relevance_score within 0.0025 of sigmoid(score), usage counting Hugging Face's
// tokens of every pair, the order and best document the reference's; TEI's
// /rerank raw_scores within 0.01 of the score (on jina-bert-v2, the first
// reranker); Cohere v2's /v2/rerank answering as /v1/rerank; /info naming the head
// llama.cpp computes. On the old code serve refused both models at start.
func TestServeCrossEncoderArchitectures(t *testing.T) {
	jina, neo := encoderModel(t, "models/jina-bert-v2-reranker-tiny.gguf"), encoderModel(t, "models/neo-bert-reranker-tiny.gguf")
	mini := encoderModel(t, "models/bert-tiny.gguf")
	// --weights file, as in TestServeCrossEncoder: the reference is of the files'
	// weights.
	s := serveWith(t, "--model", "jina="+jina, "--model", "neo="+neo, "--model", "mini="+mini, "--weights", "file")
	root := e2e.RepoRoot(t)
	var pairs crossEncoderPairs
	var archs struct {
		Models []struct {
			Model  string    `json:"model"`
			Scores []float64 `json:"scores"`
		} `json:"models"`
	}
	for name, v := range map[string]any{"crossencoder-reference.json": &pairs, "crossencoder-archs-reference.json": &archs} {
		raw, err := os.ReadFile(filepath.Join(root, "backends", "llama", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, model, score string }{
		{"jina", "models/jina-bert-v2-reranker-tiny.gguf",
			"sigmoid(s), s = tanh(cls.weight · h + cls.bias) with h the first token's ([CLS]) state of the pair, as llama.cpp's rank pooling computes the classifier head"},
		{"neo", "models/neo-bert-reranker-tiny.gguf",
			"sigmoid(s), s = cls.output.weight · tanh(cls.weight · h + cls.bias) + cls.output.bias with h the first token's ([CLS]) state of the pair, as llama.cpp's rank pooling computes the classifier head"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := slices.IndexFunc(archs.Models, func(m struct {
				Model  string    `json:"model"`
				Scores []float64 `json:"scores"`
			}) bool {
				return m.Model == tc.model
			})
			if at < 0 || len(archs.Models[at].Scores) != len(pairs.Pairs) {
				t.Fatalf("crossencoder-archs-reference.json holds no %d scores of %s", len(pairs.Pairs), tc.model)
			}
			ref := crossEncoderPairs{Pairs: slices.Clone(pairs.Pairs)}
			for i := range ref.Pairs {
				ref.Pairs[i].Logit = archs.Models[at].Scores[i]
			}
			checkCrossEncoder(t, s, tc.name, tc.name == "jina", ref)

			code, body := call(t, s.URL+"/info", "")
			var info struct {
				Models []struct {
					ID       string `json:"id"`
					Reranker *struct {
						Score string `json:"score"`
					} `json:"reranker"`
				} `json:"models"`
			}
			if err := json.Unmarshal([]byte(body), &info); code != 200 || err != nil {
				t.Fatalf("GET /info: %d %s (%v)", code, body, err)
			}
			for _, m := range info.Models {
				if m.ID == tc.name && (m.Reranker == nil || m.Reranker.Score != tc.score) {
					t.Errorf("/info's %s: reranker %+v; want the score %q", tc.name, m.Reranker, tc.score)
				}
			}

			// Cohere's v2 client posts to /v2/rerank: the same results.
			req, _ := json.Marshal(map[string]any{"model": tc.name, "query": ref.Pairs[0].Query, "documents": []string{ref.Pairs[0].Document, ref.Pairs[1].Document}})
			type results struct {
				Results []struct {
					Index int     `json:"index"`
					Score float64 `json:"relevance_score"`
				} `json:"results"`
			}
			var v1, v2 results
			for _, r := range []struct {
				route string
				into  *results
			}{{"/v1/rerank", &v1}, {"/v2/rerank", &v2}} {
				code, body := call(t, s.URL+r.route, string(req))
				if err := json.Unmarshal([]byte(body), r.into); code != 200 || err != nil || len(r.into.Results) != 2 {
					t.Fatalf("POST %s: %d %s (%v)", r.route, code, body, err)
				}
			}
			if !slices.Equal(v1.Results, v2.Results) {
				t.Errorf("/v2/rerank %+v, /v1/rerank %+v; want the same", v2.Results, v1.Results)
			}
		})
	}
}

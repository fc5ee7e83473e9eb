package conformance

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/testenv"
)

// TestCohereClient reranks with a real client: the Cohere Python SDK (pinned in
// conformance/cohere/requirements.txt), its ClientV2.rerank (POST /v2/rerank) and
// v1 Client.rerank (POST /v1/rerank) pointed at the tiny reranker by base_url. The
// SDK must parse both answers, and what it parsed must be the server's own answer:
// the same order and scores as a direct POST /v1/rerank.
//
// It runs when EMBED_STACK_COHERE_PYTHON names the virtual environment's python;
// `make test-cohere` (part of `make test`) creates it and sets it.
func TestCohereClient(t *testing.T) {
	py := testenv.Get("EMBED_STACK_COHERE_PYTHON")
	if py == "" {
		t.Skip("EMBED_STACK_COHERE_PYTHON is not set: `make test-cohere` runs this test")
	}
	s := rerankServer(t)
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, py, filepath.Join(repoRoot, "conformance", "cohere", "rerank.py"), s.URL)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("cohere client: %v\n%s\n%s", err, out, stderr)
	}
	// v2: [index, score] for top_n 2; v1: [index, score, text] for all three.
	var got struct {
		V2 [][2]float64 `json:"v2"`
		V1 [][3]any     `json:"v1"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}

	r := s.do(t, http.MethodPost, "/v1/rerank", map[string]any{"query": "What is the capital of China?", "documents": []string{
		"The capital of China is Beijing.",
		"Gravity is a force that attracts two bodies towards each other.",
		"Rivers, mountains and the weather of the north.",
	}}, nil)
	var want cohereRerank
	r.decode(t, &want)
	if len(got.V1) != len(want.Results) || len(got.V2) != 2 {
		t.Fatalf("client results v1 %v v2 %v; server %+v", got.V1, got.V2, want.Results)
	}
	for k, w := range want.Results {
		if idx, _ := got.V1[k][0].(float64); int(idx) != w.Index || got.V1[k][1] != w.RelevanceScore {
			t.Errorf("v1 result %d: client %v, server index %d score %v", k, got.V1[k], w.Index, w.RelevanceScore)
		}
		if k < 2 && (int(got.V2[k][0]) != w.Index || got.V2[k][1] != w.RelevanceScore) {
			t.Errorf("v2 result %d: client %v, server index %d score %v", k, got.V2[k], w.Index, w.RelevanceScore)
		}
	}
}

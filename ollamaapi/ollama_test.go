package ollamaapi

import (
	"encoding/json"
	"testing"
)

// The answer is JSON for any model name, control characters and non-ASCII
// included (a model name is echoed as sent).
func TestEmbedResponseJSON(t *testing.T) {
	for _, model := range []string{"m", "÷Xç\x12\"\\", "a\u2028b"} {
		r := EmbedResponse{Model: model, Embeddings: [][]float32{{0.5, -1e-8}}, TotalDuration: 3, LoadDuration: 1, PromptEvalCount: 2}
		var back struct {
			Model      string      `json:"model"`
			Embeddings [][]float32 `json:"embeddings"`
		}
		raw := r.AppendJSON(nil)
		if err := json.Unmarshal(raw, &back); err != nil || back.Model != model || back.Embeddings[0][1] != -1e-8 {
			t.Fatalf("%q: %s does not decode back (%v)", model, raw, err)
		}
	}
}

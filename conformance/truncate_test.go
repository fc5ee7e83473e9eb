package conformance

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// truncLimit is --max-input-tokens of the truncation server: small, so that inputs
// over it stay cheap.
const truncLimit = 64

// truncFlags start the truncation server (also used for /info, which reports them).
var truncFlags = []string{"--max-input-tokens", "64", "--warm-max-tokens", "64", "--threads", "1"}

func truncServer(t *testing.T) *server { return serverWith(t, truncFlags...) }

// tokenizeCount posts body to /tokenize and returns the ids of its one input.
func (s *server) tokenizeIDs(t *testing.T, body map[string]any) []int {
	t.Helper()
	r := s.do(t, http.MethodPost, "/tokenize", body, nil)
	if r.status != http.StatusOK {
		t.Fatalf("POST /tokenize %v: %d %s", body, r.status, truncate(r.body))
	}
	var out struct {
		IDs     []int `json:"ids"`
		Count   int   `json:"count"`
		Total   int   `json:"total"`
		Results []struct {
			IDs   []int `json:"ids"`
			Count int   `json:"count"`
		} `json:"results"`
	}
	r.decode(t, &out)
	if out.Count != len(out.IDs) || out.Total != out.Count {
		t.Fatalf("POST /tokenize: count %d total %d for %d ids", out.Count, out.Total, len(out.IDs))
	}
	return out.IDs
}

// An input over the limit is refused by default (OpenAI's contract); with
// truncate it is cut to exactly the limit, the vector is the one of the cut text
// sent as it is, and usage counts the tokens embedded.
func TestTruncateDocument(t *testing.T) {
	s := truncServer(t)
	long := repeatedText(t, 100) // "a a a ...": 100 tokens, 101 with EOS
	env := requireErrorEnvelope(t, s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": long}, nil), http.StatusBadRequest)
	if env.Error.Code == nil || *env.Error.Code != "context_length_exceeded" {
		t.Errorf("without truncate: code %v, want context_length_exceeded", env.Error.Code)
	}
	for _, c := range []struct {
		truncate any
		kept     string // the text that fits: 63 tokens + EOS = 64
	}{
		{true, repeatedText(t, 63)},
		{"end", repeatedText(t, 63)},
		// From the end, the longest part that fits starts with a space: " a" x 63.
		{"start", strings.Repeat(" a", 63)},
	} {
		if n := len(s.tokenizeIDs(t, map[string]any{"text": c.kept})); n != truncLimit {
			t.Fatalf("the expected kept text has %d tokens, want %d", n, truncLimit)
		}
		got := s.rawEmbed(t, map[string]any{"input": []string{long, "short"}, "truncate": c.truncate}, nil)
		direct := s.rawEmbed(t, map[string]any{"input": []string{c.kept, "short"}}, nil)
		if got.Usage.PromptTokens != truncLimit+2 || got.Usage.TotalTokens != truncLimit+2 {
			t.Errorf("truncate %v: usage %+v, want %d (64 + \"short\" and EOS)", c.truncate, got.Usage, truncLimit+2)
		}
		if got.Usage != direct.Usage {
			t.Errorf("truncate %v: usage %+v, the kept text sent as is %+v", c.truncate, got.Usage, direct.Usage)
		}
		for i := range got.Data {
			requireSame(t, "truncated vs kept text", got.Data[i].Embedding, direct.Data[i].Embedding)
		}

		// /tokenize and /embed take the same field.
		ids := s.tokenizeIDs(t, map[string]any{"text": long, "truncate": c.truncate})
		if want := s.tokenizeIDs(t, map[string]any{"text": c.kept}); !slices.Equal(ids, want) {
			t.Errorf("truncate %v: /tokenize ids differ from the kept text's", c.truncate)
		}
		r := s.do(t, http.MethodPost, "/embed", map[string]any{"texts": []string{long}, "truncate": c.truncate}, nil)
		var native struct {
			Vectors [][]float64 `json:"vectors"`
		}
		if r.status != http.StatusOK {
			t.Fatalf("/embed truncate %v: %d %s", c.truncate, r.status, truncate(r.body))
		}
		r.decode(t, &native)
		requireSame(t, "/embed truncated vs kept text", native.Vectors[0], direct.Data[0].Embedding)
	}
}

// A query keeps its whole instruction prefix and EOS; only the caller's text is cut,
// to the longest part whose wrapped form fits.
func TestTruncateQuery(t *testing.T) {
	s := truncServer(t)
	query := func(text string) map[string]any {
		return map[string]any{"text": text, "input_type": "query", "instruction": "Find it"}
	}
	// The longest "a a ..." whose wrapped tokens fit, found through /tokenize (which
	// answers 400 past the limit).
	n := 1
	for s.do(t, http.MethodPost, "/tokenize", query(repeatedText(t, n+1)), nil).status == http.StatusOK {
		n++
	}
	kept := repeatedText(t, n)
	want := s.tokenizeIDs(t, query(kept))
	if len(want) > truncLimit || len(want) < truncLimit-1 {
		t.Fatalf("the kept query has %d tokens, want %d or %d", len(want), truncLimit-1, truncLimit)
	}
	long := repeatedText(t, 200)
	if got := s.tokenizeIDs(t, map[string]any{"text": long, "input_type": "query", "instruction": "Find it", "truncate": true}); !slices.Equal(got, want) {
		t.Fatalf("truncated query ids\n%v\nwant (the kept text's)\n%v", got, want)
	}
	if want[len(want)-1] != eosID || !slices.Equal(want[:5], s.tokenizeIDs(t, query("a"))[:5]) {
		t.Errorf("the truncated query lost its prefix or EOS: %v", want)
	}
	body := map[string]any{"input": long, "input_type": "query", "instruction": "Find it", "truncate": "end"}
	got := s.rawEmbed(t, body, nil)
	direct := s.rawEmbed(t, map[string]any{"input": kept, "input_type": "query", "instruction": "Find it"}, nil)
	if got.Usage.PromptTokens != len(want) {
		t.Errorf("usage %d, want %d", got.Usage.PromptTokens, len(want))
	}
	requireSame(t, "truncated query vs kept query", got.Data[0].Embedding, direct.Data[0].Embedding)

	// An instruction longer than the limit leaves no room for any text.
	body["instruction"] = strings.Repeat("task ", 80)
	env := requireErrorEnvelope(t, s.do(t, http.MethodPost, "/v1/embeddings", body, nil), http.StatusBadRequest)
	if env.Error.Code == nil || *env.Error.Code != "context_length_exceeded" || !strings.Contains(env.Error.Message, "the wrapping alone") {
		t.Errorf("instruction over the limit: %+v", env.Error)
	}
	body["truncate"] = "middle"
	env = requireErrorEnvelope(t, s.do(t, http.MethodPost, "/v1/embeddings", body, nil), http.StatusBadRequest)
	if env.Error.Param == nil || *env.Error.Param != "truncate" {
		t.Errorf("truncate \"middle\": %+v", env.Error)
	}
}

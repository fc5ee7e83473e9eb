package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// tokenizerJSONPath is where scripts/fetch-tokenizer.sh puts the real Qwen3
// tokenizer.json (the Makefile runs it before the tests).
func tokenizerJSONPath(t testing.TB) string {
	return filepath.Join(testrepo.RootOf(t), ".cache", "qwen3", "tokenizer.json")
}

// vocabFromTokenizerJSON builds the Vocab a GGUF converter would store from an HF
// tokenizer.json: tokens by id, added tokens typed 3 (special: true) or 4, every other
// token 1, merges joined by a space.
func vocabFromTokenizerJSON(path string) (Vocab, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Vocab{}, err
	}
	var tj struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Type   string            `json:"type"`
			Vocab  map[string]int    `json:"vocab"`
			Merges []json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		return Vocab{}, fmt.Errorf("%s: %w", path, err)
	}
	if tj.Model.Type != "BPE" {
		return Vocab{}, fmt.Errorf("%s: model type %q, want BPE", path, tj.Model.Type)
	}
	n := len(tj.Model.Vocab)
	for _, a := range tj.AddedTokens {
		n = max(n, a.ID+1)
	}
	v := Vocab{Tokens: make([]string, n), Types: make([]int32, n)}
	for tok, id := range tj.Model.Vocab {
		v.Tokens[id], v.Types[id] = tok, TokenNormal
	}
	for _, a := range tj.AddedTokens {
		v.Tokens[a.ID], v.Types[a.ID] = a.Content, TokenUserDefined
		if a.Special {
			v.Types[a.ID] = TokenControl
		}
	}
	for i, typ := range v.Types {
		if typ == 0 {
			return Vocab{}, fmt.Errorf("%s: id %d has no token", path, i)
		}
	}
	v.Merges = make([]string, len(tj.Model.Merges))
	for i, m := range tj.Model.Merges {
		var pair []string // the current format: ["Ġ", "t"]
		if err := json.Unmarshal(m, &pair); err == nil && len(pair) == 2 {
			v.Merges[i] = pair[0] + " " + pair[1]
			continue
		}
		var s string // the legacy format: "Ġ t"
		if err := json.Unmarshal(m, &s); err != nil {
			return Vocab{}, fmt.Errorf("%s: merge %d: %s is neither a pair nor a string", path, i, m)
		}
		v.Merges[i] = s
	}
	return v, nil
}

var qwen struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

// qwenTokenizer returns the tokenizer built from the real Qwen3 tokenizer.json,
// skipping the test when the file has not been fetched.
func qwenTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	path := tokenizerJSONPath(t)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is missing; run scripts/fetch-tokenizer.sh (make test does) to fetch the real Qwen3 tokenizer", path)
	}
	qwen.once.Do(func() {
		v, err := vocabFromTokenizerJSON(path)
		if err != nil {
			qwen.err = err
			return
		}
		qwen.tok, qwen.err = New(v)
	})
	if qwen.err != nil {
		t.Fatal(qwen.err)
	}
	return qwen.tok
}

// pieces returns the pre-tokenizer's split of s.
func pieces(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := nextPiece(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// tinyVocab is a small hand-made byte-level vocabulary: all 256 byte tokens, the
// merges given (each result becomes a normal token), then the added tokens.
func tinyVocab(merges []string, control, userDefined []string) Vocab {
	var v Vocab
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, string(byteToRune[b]))
		v.Types = append(v.Types, TokenNormal)
	}
	seen := map[string]bool{}
	for _, tok := range v.Tokens {
		seen[tok] = true
	}
	for _, m := range merges {
		joined := strings.Replace(m, " ", "", 1)
		if !seen[joined] {
			seen[joined] = true
			v.Tokens = append(v.Tokens, joined)
			v.Types = append(v.Types, TokenNormal)
		}
	}
	v.Merges = merges
	for _, c := range control {
		v.Tokens = append(v.Tokens, c)
		v.Types = append(v.Types, TokenControl)
	}
	for _, u := range userDefined {
		v.Tokens = append(v.Tokens, u)
		v.Types = append(v.Types, TokenUserDefined)
	}
	return v
}

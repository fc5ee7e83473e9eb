package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Token types as llama.cpp numbers them (enum llama_token_type).
const (
	tokenNormal      int32 = 1
	tokenControl     int32 = 3
	tokenUserDefined int32 = 4
)

// eosToken is the text of Qwen3's end-of-text token, used as EOS, padding and BOS.
const eosToken = "<|endoftext|>"

// maxVocab bounds token ids read from tokenizer.json, so a corrupt id cannot make us
// allocate gigabytes for the id-ordered token list.
const maxVocab = 10_000_000

// vocab is a Hugging Face tokenizer.json turned into GGUF's tokenizer arrays.
type vocab struct {
	tokens []string // by id
	types  []int32  // by id
	merges []string // "a b", in rank order
	eosID  uint32
}

type tokenizerJSON struct {
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

// loadVocab reads a byte-level BPE tokenizer.json. Tokens are ordered by id (model.vocab
// and added_tokens together must cover 0..n-1 with no gaps); added tokens are control
// tokens when marked special and user-defined otherwise; merges may be "a b" strings
// or [a, b] pairs, depending on the tokenizers version that wrote the file.
func loadVocab(path string) (*vocab, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading tokenizer: %w (run scripts/fetch-tokenizer.sh to fetch the Qwen3 one)", err)
	}
	var tj tokenizerJSON
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: model.type is %q, want \"BPE\"", path, tj.Model.Type)
	}

	n := 0
	for tok, id := range tj.Model.Vocab {
		if id < 0 || id >= maxVocab {
			return nil, fmt.Errorf("%s: model.vocab token %q has id %d, want 0..%d", path, tok, id, maxVocab-1)
		}
		n = max(n, id+1)
	}
	for _, at := range tj.AddedTokens {
		if at.ID < 0 || at.ID >= maxVocab {
			return nil, fmt.Errorf("%s: added token %q has id %d, want 0..%d", path, at.Content, at.ID, maxVocab-1)
		}
		n = max(n, at.ID+1)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: the vocabulary is empty", path)
	}

	v := &vocab{tokens: make([]string, n), types: make([]int32, n)}
	set := make([]bool, n)
	for tok, id := range tj.Model.Vocab {
		if set[id] {
			return nil, fmt.Errorf("%s: model.vocab holds id %d twice (%q and %q)", path, id, v.tokens[id], tok)
		}
		v.tokens[id], v.types[id], set[id] = tok, tokenNormal, true
	}
	eos := -1
	for _, at := range tj.AddedTokens {
		typ := tokenUserDefined
		if at.Special {
			typ = tokenControl
		}
		if set[at.ID] && v.tokens[at.ID] != at.Content {
			return nil, fmt.Errorf("%s: added token %q has id %d, which already belongs to %q", path, at.Content, at.ID, v.tokens[at.ID])
		}
		v.tokens[at.ID], v.types[at.ID], set[at.ID] = at.Content, typ, true
		if at.Content == eosToken {
			eos = at.ID
		}
	}
	for id, ok := range set {
		if !ok {
			return nil, fmt.Errorf("%s: no token has id %d; ids must run from 0 to %d without gaps", path, id, n-1)
		}
	}
	if eos < 0 {
		return nil, fmt.Errorf("%s: no added token %q, which the model uses as EOS", path, eosToken)
	}
	v.eosID = uint32(eos)

	v.merges = make([]string, len(tj.Model.Merges))
	for i, m := range tj.Model.Merges {
		s, err := parseMerge(m)
		if err != nil {
			return nil, fmt.Errorf("%s: merge %d: %w", path, i, err)
		}
		v.merges[i] = s
	}
	return v, nil
}

// parseMerge returns a merge as GGUF stores it, "a b". llama.cpp splits that at the
// first space after the first byte, so a pair whose parts contain spaces could not be
// told apart and is refused.
func parseMerge(m json.RawMessage) (string, error) {
	m = bytes.TrimSpace(m)
	if len(m) > 0 && m[0] == '"' {
		var s string
		if err := json.Unmarshal(m, &s); err != nil {
			return "", err
		}
		if strings.IndexByte(s, ' ') < 1 {
			return "", fmt.Errorf("%q is not of the form \"a b\"", s)
		}
		return s, nil
	}
	var pair []string
	if err := json.Unmarshal(m, &pair); err != nil {
		return "", fmt.Errorf("%s is neither a string nor a pair of strings", m)
	}
	if len(pair) != 2 || pair[0] == "" || pair[1] == "" {
		return "", fmt.Errorf("%s is not a pair of two non-empty strings", m)
	}
	if strings.Contains(pair[0], " ") || strings.Contains(pair[1], " ") {
		return "", fmt.Errorf("%s holds a space, which GGUF's \"a b\" merge form cannot represent", m)
	}
	return pair[0] + " " + pair[1], nil
}

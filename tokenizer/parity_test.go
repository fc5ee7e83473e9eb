package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/text/unicode/norm"
)

type parityEntry struct {
	Text string  `json:"text"`
	IDs  []int32 `json:"ids"`
}

func loadParity(t testing.TB) []parityEntry {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "parity.json"))
	if err != nil {
		t.Fatalf("%v (tools/tokenizer-parity writes it)", err)
	}
	var entries []parityEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		t.Fatalf("testdata/parity.json: %v", err)
	}
	return entries
}

// TestParity is the proof that Encode is Hugging Face's Qwen3 tokenizer: every text in
// testdata/parity.json, whose ids two independent implementations agreed on (HF's Rust
// tokenizers and the JS tokenizers of transformers.js, see tools/tokenizer-parity),
// must give exactly those ids.
func TestParity(t *testing.T) {
	tok := qwenTokenizer(t)
	entries := loadParity(t)
	if len(entries) < 200 {
		t.Fatalf("testdata/parity.json has %d entries; the generator writes at least 200", len(entries))
	}
	var passed, decoded, longest int
	for i, e := range entries {
		got := tok.Encode(e.Text)
		if !slices.Equal(got, e.IDs) {
			t.Errorf("entry %d: Encode(%s)\n got %v\nwant %v", i, abbrev(e.Text), abbrevIDs(got), abbrevIDs(e.IDs))
			continue
		}
		passed++
		longest = max(longest, len(got))

		text, err := tok.Decode(got)
		if err != nil {
			t.Errorf("entry %d: Decode: %v", i, err)
			continue
		}
		// Decoding gives back the normalised text. NFC applies to the stretches
		// between added tokens, which for these texts (added tokens end in '>') is
		// the same as NFC of the whole.
		if want := norm.NFC.String(e.Text); text != want {
			t.Errorf("entry %d: Decode(Encode(%s)) = %s, want the NFC form %s", i, abbrev(e.Text), abbrev(text), abbrev(want))
			continue
		}
		decoded++
	}
	if longest < 20000 {
		t.Errorf("the longest parity text has %d tokens; the set must include one of at least 20000", longest)
	}
	t.Logf("parity: %d/%d texts encode to HF's ids exactly (longest %d tokens); %d decode back to their NFC form", passed, len(entries), longest, decoded)
}

func abbrev(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%q... (%d bytes)", s[:200], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func abbrevIDs(ids []int32) string {
	if len(ids) > 60 {
		return fmt.Sprintf("%v... (%d ids)", ids[:60], len(ids))
	}
	return fmt.Sprint(ids)
}

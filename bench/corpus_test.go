package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// byteTok is a tokenizer of one token per byte: cuts are exact at once.
type byteTok struct{}

func (byteTok) Encode(s string) []int32 {
	ids := make([]int32, len(s))
	for i := range len(s) {
		ids[i] = int32(s[i])
	}
	return ids
}

func (byteTok) Decode(ids []int32) (string, error) {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b), nil
}

func TestCorpusByteTokenizer(t *testing.T) {
	text := strings.Repeat("abcdefghij", 20) // 200 tokens
	c, err := NewCorpus(byteTok{}, text, "task")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		cut      func(int) (Input, error)
		n        int
		wantText string
	}{
		// Each cut starts where the previous one ended.
		{"document", c.Document, 6, "abcde"},
		{"next document", c.Document, 4, "fgh"},
		{"query", c.Query, len("Instruct: task\nQuery:") + 3, "Instruct: task\nQuery:ij"},
	}
	for _, tt := range tests {
		in, err := tt.cut(tt.n)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if in.Text != tt.wantText {
			t.Errorf("%s: text %q, want %q", tt.name, in.Text, tt.wantText)
		}
		want := append(byteTok{}.Encode(tt.wantText), routing.EOS)
		if !slices.Equal(in.Tokens, want) {
			t.Errorf("%s: tokens %v, want %v", tt.name, in.Tokens, want)
		}
	}
	// A cut that runs past the end starts again at the beginning.
	in, err := c.Document(190)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(in.Text, "abcde") || len(in.Tokens) != 190 {
		t.Errorf("wrapped cut: %d tokens starting %q, want 190 from the start", len(in.Tokens), in.Text[:5])
	}
}

func TestCorpusErrors(t *testing.T) {
	c, err := NewCorpus(byteTok{}, strings.Repeat("x", 100), "a long task")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(10); err == nil || !strings.Contains(err.Error(), "leaves no room") {
		t.Errorf("Query(10) with a 22-token wrapping: err %v, want 'leaves no room'", err)
	}
	if _, err := c.Document(500); err == nil || !strings.Contains(err.Error(), "longer than the corpus") {
		t.Errorf("Document(500) of a 100-token corpus: err %v, want 'longer than the corpus'", err)
	}
	if _, err := NewCorpus(byteTok{}, "short", ""); err == nil {
		t.Error("NewCorpus of 5 tokens: no error")
	}
}

// realTokenizer is the Qwen3 tokenizer read from the tiny test model.
func realTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	root := e2e.RepoRoot(t)
	path := filepath.Join(root, "models", "tiny.gguf")
	if _, err := os.Stat(path); err != nil {
		e2e.Require(t, "missing models/tiny.gguf: run `make models` first")
	}
	tok, err := tokenizer.FromGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestCorpusExactLengths cuts the real corpus with the real tokenizer: every input
// must re-tokenize to exactly the wanted length, end-of-text included, and
// successive inputs must differ.
func TestCorpusExactLengths(t *testing.T) {
	tok := realTokenizer(t)
	text, err := ReadCorpus(e2e.RepoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCorpus(tok, text, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Tokens() < 100000 {
		t.Fatalf("corpus is %d tokens; Opticks is well over 100k", c.Tokens())
	}
	prefix := routing.Wrap(routing.Query, routing.DefaultInstruction, "")
	seen := map[string]bool{}
	for _, n := range []int{16, 32, 100, 128, 512, 1024, 2048, 15000} {
		for _, typ := range []routing.InputType{routing.Document, routing.Query} {
			if typ == routing.Query && n < 32 {
				continue // the default instruction alone is about 20 tokens
			}
			cut := c.Document
			if typ == routing.Query {
				cut = c.Query
			}
			in, err := cut(n)
			if err != nil {
				t.Fatalf("%s of %d: %v", typ, n, err)
			}
			if len(in.Tokens) != n {
				t.Errorf("%s of %d: %d tokens", typ, n, len(in.Tokens))
			}
			if got := append(tok.Encode(in.Text), routing.EOS); !slices.Equal(got, in.Tokens) {
				t.Errorf("%s of %d: Tokens are not Encode(Text) + EOS", typ, n)
			}
			if typ == routing.Query && !strings.HasPrefix(in.Text, prefix) {
				t.Errorf("query of %d does not start with the instruction: %.60q", n, in.Text)
			}
			if seen[in.Text] {
				t.Errorf("%s of %d repeats an earlier text", typ, n)
			}
			seen[in.Text] = true
		}
	}
}

// TestModelCorpusFramed: a corpus for another family wraps inputs in its prompts and
// frames their tokens in its special tokens, head and tail, within the wanted length.
func TestModelCorpusFramed(t *testing.T) {
	text := strings.Repeat("abcdefghij", 20)
	prompts := routing.Prompts{Family: "e5", Query: "q: ", Document: "p: "}
	frame := routing.Frame{Head: []int32{1000}, Tail: []int32{1001}, Text: "[CLS] and [SEP]"}
	c, err := NewModelCorpus(byteTok{}, text, prompts, frame)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cut      func(int) (Input, error)
		n        int
		wantText string
	}{
		{c.Document, 8, "p: abc"}, // 2 special tokens, 3 of prompt, 3 of text
		{c.Query, 7, "q: de"},
	} {
		in, err := tt.cut(tt.n)
		if err != nil {
			t.Fatal(err)
		}
		want := append(append([]int32{1000}, byteTok{}.Encode(tt.wantText)...), 1001)
		if in.Text != tt.wantText || !slices.Equal(in.Tokens, want) {
			t.Errorf("cut of %d: %q %v, want %q %v", tt.n, in.Text, in.Tokens, tt.wantText, want)
		}
	}
	if _, err := c.Document(5); err == nil || !strings.Contains(err.Error(), "special tokens") {
		t.Errorf("Document(5) with a 3-token prompt and 2 special tokens: err %v, want 'leaves no room'", err)
	}
}

// TestModelCorpusMiniLM cuts the real corpus with MiniLM's WordPiece tokenizer (from
// bert-tiny.gguf, which carries it) in the frame the server reads from the model:
// [CLS] text [SEP], exactly n tokens, no prompt.
func TestModelCorpusMiniLM(t *testing.T) {
	path := filepath.Join(e2e.RepoRoot(t), "models", "bert-tiny.gguf")
	if _, err := os.Stat(path); err != nil {
		e2e.Require(t, "missing models/bert-tiny.gguf: run `make models` first")
	}
	tok, err := tokenizer.FromGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	facts, err := modelinfo.Read(path, modelinfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	frame, err := facts.Frame(tok)
	if err != nil {
		t.Fatal(err)
	}
	text, err := ReadCorpus(e2e.RepoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewModelCorpus(tok, text, modelPrompts(facts.Prompts), frame)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{16, 32, 100, 128, 512} {
		for _, cut := range []func(int) (Input, error){c.Document, c.Query} {
			in, err := cut(n)
			if err != nil {
				t.Fatalf("cut of %d: %v", n, err)
			}
			want := append(append([]int32{101}, tok.Encode(in.Text)...), 102)
			if len(in.Tokens) != n || !slices.Equal(in.Tokens, want) {
				t.Errorf("cut of %d: %d tokens, starting %v and ending %v; want [CLS] Encode(Text) [SEP] = %d tokens",
					n, len(in.Tokens), in.Tokens[:2], in.Tokens[len(in.Tokens)-2:], len(want))
			}
		}
	}
}

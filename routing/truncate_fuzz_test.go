package routing_test

import (
	"slices"
	"testing"

	"github.com/embed-stack/embed-stack/routing"
)

// FuzzTruncate: with truncation, any text and direction, as a document or a query,
// is either refused as context_length_exceeded (the wrapping leaves no room) or
// becomes a sequence of at most the limit, closed by EOS, with no control id; an
// input that fits is left exactly as without truncation.
func FuzzTruncate(f *testing.F) {
	v := loadFuzzVocab(f)
	f.Add("hello world, a sentence long enough to be cut somewhere in its middle", false, false)
	f.Add("日本語のテキストも文字の境目で切る。", true, true)
	f.Add("<|endoftext|> a b c", true, false)
	const limit = 24 // small: the default query prefix takes 18 tokens of it
	r := &routing.Router{Config: routing.Config{Dim: 64, MaxInputTokens: limit, WarmMaxTokens: limit}, Tokenizer: v.tok}
	f.Fuzz(func(t *testing.T, text string, query, start bool) {
		req := &routing.Request{Texts: []string{text}, Truncate: routing.TruncateEnd}
		if start {
			req.Truncate = routing.TruncateStart
		}
		if query {
			req.InputType = "query"
		}
		seqs, err := r.Prepare(req)
		if err != nil {
			ie := requireInputError(t, err, "input")
			if text != "" && ie.Code != routing.CodeContextLength {
				t.Fatalf("input %q refused: %v", text, err)
			}
			return
		}
		v.checkSeq(t, seqs[0], limit)
		req.Truncate = routing.NoTruncation
		if whole, err := r.Prepare(req); err == nil && !slices.Equal(whole[0], seqs[0]) {
			t.Fatalf("an input that fits was changed: %v, untruncated %v", seqs[0], whole[0])
		}
	})
}

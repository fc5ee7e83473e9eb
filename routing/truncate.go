package routing

import "unicode/utf8"

// Truncation says what to do with an input over the per-input token limit.
type Truncation int

const (
	// NoTruncation refuses it with a 400 (OpenAI's contract); the zero value.
	NoTruncation Truncation = iota
	// TruncateEnd drops the end of the input's text: its beginning is embedded.
	TruncateEnd
	// TruncateStart drops the beginning: the end is embedded.
	TruncateStart
)

// inputLimit is the most tokens one input may have, the Frame's included.
func (r *Router) inputLimit() int {
	if r.Long == nil {
		return min(r.Config.maxInputTokens(), r.Config.warmMaxTokens())
	}
	return r.Config.maxInputTokens()
}

// truncateText returns the tokens (without the Frame) of the longest part of text, cut
// between two characters, that fits in max tokens once wrapped: its beginning for
// TruncateEnd, its end for TruncateStart. What is embedded is then exactly what
// embedding that shorter text would embed: the instruction prefix stays whole, the
// caller's Frame closes it, and the token count is that of the shorter text.
//
// Cutting text rather than token ids keeps that equality: a BPE token sequence cut
// in the middle of a word is not always the tokenization of any text. The cut is
// found by bisection over character boundaries (about log2(len(text)) tokenizations
// of the kept part); a token count that is not monotone in the prefix length could
// only make it keep a little less, never exceed max.
func (r *Router) truncateText(i int, typ InputType, instruction, text string, max int, dir Truncation) ([]int32, error) {
	prompts := r.Config.Prompts
	best, ok := longestFit(text, dir, max, func(part string) []int32 { return r.Tokenizer.Encode(prompts.Wrap(typ, instruction, part)) })
	if !ok {
		frame := r.Config.Frame
		kept := len(r.Tokenizer.Encode(prompts.Wrap(typ, instruction, "")))
		return nil, inputErr("input", i, CodeContextLength,
			"input %d cannot be truncated to %d tokens and keep any of its text: the wrapping alone (the prompt and %s) takes %d.", i, max+frame.Len(), frame.orQwen3().Text, kept+frame.Len())
	}
	return best, nil
}

// longestFit returns encode of the longest part of text, cut between two
// characters, whose encoding has at most max tokens: its beginning for
// TruncateEnd, its end for TruncateStart; false when no part with a character
// fits. The whole text is taken not to fit (the caller has tried it).
func longestFit(text string, dir Truncation, max int, encode func(part string) []int32) ([]int32, bool) {
	part := func(cut int) string {
		if dir == TruncateStart {
			return text[cut:]
		}
		return text[:cut]
	}
	// Cut points are character starts plus len(text). For TruncateEnd a larger cut
	// keeps more, for TruncateStart a smaller one: fits is monotone in the index
	// of the cut point so that bisection finds the boundary.
	cuts := make([]int, 0, len(text)+1)
	for j := range text {
		if utf8.RuneStart(text[j]) {
			cuts = append(cuts, j)
		}
	}
	cuts = append(cuts, len(text))
	keeps := func(k int) int { // the cut at rank k from "keep nothing"
		if dir == TruncateStart {
			return cuts[len(cuts)-1-k]
		}
		return cuts[k]
	}
	// Invariant: rank lo fits (rank 0 keeps nothing), rank hi does not (the whole
	// text did not fit).
	lo, hi := 0, len(cuts)-1
	var best []int32
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if seq := encode(part(keeps(mid))); len(seq) <= max {
			lo, best = mid, seq
		} else {
			hi = mid
		}
	}
	return best, lo > 0
}

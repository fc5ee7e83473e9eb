package tokenizer

import (
	"math"
	"strings"
	"unicode/utf8"
)

// unkPenalty is how much lower than the lowest token score an unknown character
// scores (SentencePiece's kUnkPenalty, also HF's and llama.cpp's).
const unkPenalty = 10.0

// unigram is the text pipeline of HF's tokenizers for SentencePiece Unigram models
// (XLM-R, T5, mT5 and their descendants), as transformers' converters write it:
// Precompiled (the model's precompiled_charsmap), Replace(" {2,}", " ") when the model
// removes extra whitespace, Metaspace ("▁" for ' ', prepended when the model adds a
// space prefix, split before each "▁"), then Viterbi over the token scores with runs
// of unknown characters fused into one unknown id.
type unigram struct {
	t              *Tokenizer
	scores         []float32
	unk            int32
	unkScore       float64
	maxTokenLen    int // bytes
	charsmap       *charsmap
	addPrefix      bool
	collapseSpaces bool
}

// matchable says whether Viterbi may produce id from text. HF's Unigram matches every
// vocabulary entry, its control tokens too: with split_special_tokens, "<s>" in text is
// still id 0, since the model scores that piece 0. The server never lets text produce
// a control token (package doc), so control and unknown tokens are left out, as
// SentencePiece and llama.cpp leave them out; unused ones are not in HF's vocabulary.
func (u *unigram) matchable(id int32) bool {
	switch u.t.types[id] {
	case TokenNormal, TokenUserDefined:
		return true
	}
	return false
}

func (u *unigram) appendText(ids []int32, text string, limit int) []int32 {
	s := text
	if u.charsmap != nil {
		s = u.charsmap.normalize(s)
	}
	if u.collapseSpaces && strings.Contains(s, "  ") {
		var b strings.Builder
		b.Grow(len(s))
		for i := 0; i < len(s); i++ {
			if s[i] == ' ' && i > 0 && s[i-1] == ' ' {
				continue
			}
			b.WriteByte(s[i])
		}
		s = b.String()
	}
	s = strings.ReplaceAll(s, " ", phantomSpace)
	if u.addPrefix && s != "" && !strings.HasPrefix(s, phantomSpace) {
		s = phantomSpace + s
	}
	// Split before each "▁", which starts the next word.
	for start := 0; start < len(s); {
		end := strings.Index(s[start+1:], phantomSpace)
		if end < 0 {
			end = len(s)
		} else {
			end += start + 1
		}
		ids = u.appendWord(ids, s[start:end])
		start = end
		if limit > 0 && len(ids) > limit {
			break
		}
	}
	return ids
}

// lattice is one position of the Viterbi search: the best path ending there.
type lattice struct {
	score float64
	start int32 // byte offset the last token starts at; -1 before any path reaches here
	id    int32
}

// appendWord appends the highest-scoring segmentation of word, as HF's
// Unigram::encode_optimized finds it: positions in byte order, candidate tokens
// shortest first, a later candidate replacing an earlier one only when strictly
// better, the unknown id for a character no token of its own length covers.
func (u *unigram) appendWord(ids []int32, word string) []int32 {
	n := len(word)
	best := make([]lattice, n+1)
	for i := range best {
		best[i] = lattice{score: math.Inf(-1), start: -1}
	}
	best[0] = lattice{start: 0}
	for pos := 0; pos < n; {
		_, rl := utf8.DecodeRuneInString(word[pos:])
		here := best[pos].score
		single := false
		for end := pos + rl; end <= n && end-pos <= u.maxTokenLen; {
			if id, ok := u.t.ids.find(&u.t.tokens, word[pos:end]); ok && u.matchable(id) {
				if c := here + float64(u.scores[id]); best[end].start < 0 || c > best[end].score {
					best[end] = lattice{score: c, start: int32(pos), id: id}
				}
				if end-pos == rl {
					single = true
				}
			}
			if end == n {
				break
			}
			_, k := utf8.DecodeRuneInString(word[end:])
			end += k
		}
		if !single {
			if c := here + u.unkScore; best[pos+rl].start < 0 || c > best[pos+rl].score {
				best[pos+rl] = lattice{score: c, start: int32(pos), id: u.unk}
			}
		}
		pos += rl
	}
	// Backtrack, fusing runs of unknown ids into one.
	n0 := len(ids)
	for end := n; end > 0; {
		node := best[end]
		if !(node.id == u.unk && len(ids) > n0 && ids[len(ids)-1] == u.unk) {
			ids = append(ids, node.id)
		}
		end = int(node.start)
	}
	for i, j := n0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
	}
	return ids
}

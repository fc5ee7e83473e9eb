package tokenizer

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// phantomSpace is the "▁" (U+2581) that llama.cpp's converter puts before every
// WordPiece token that starts a word ("▁the"), while a continuation ("##ing" in
// vocab.txt) is stored without its "##" ("ing").
const phantomSpace = "\u2581"

// maxWordChars is WordPiece's max_input_chars_per_word: a word of more characters is
// one [UNK]. Every BERT tokenizer.json in use has 100, and GGUF does not store it.
const maxWordChars = 100

// wordPiece is the text pipeline of HF's BERT tokenizers: BertNormalizer (clean_text
// and handle_chinese_chars on, lowercase and strip_accents as configured),
// BertPreTokenizer, then greedy longest-match-first WordPiece.
type wordPiece struct {
	t            *Tokenizer
	unk          int32
	lowercase    bool
	stripAccents bool
	maxTokenLen  int // bytes of the longest word-initial token, "▁" included
}

// bertASCII is bert_tables.go's classes for the ASCII range, looked up without a
// binary search.
var bertASCII = func() (c [128]uint8) {
	for r := rune(0); r < 128; r++ {
		switch {
		case bertDrop.has(r):
			c[r] = bertDropClass
		case bertSpace.has(r) || r == ' ':
			c[r] = bertSpaceClass
		case bertPunct.has(r):
			c[r] = bertPunctClass
		}
	}
	return c
}()

const (
	bertOther uint8 = iota
	bertDropClass
	bertSpaceClass
	bertPunctClass
)

// normalize is BertNormalizer: clean_text (drop control characters, whitespace to ' '),
// handle_chinese_chars (' ' around each CJK ideograph), strip_accents (NFD, then drop
// nonspacing marks), lowercase; in HF's order.
func (w *wordPiece) normalize(text string) string {
	var b strings.Builder
	b.Grow(len(text) + 8)
	ascii := true
	for _, r := range text {
		if r < utf8.RuneSelf {
			switch bertASCII[r] {
			case bertDropClass:
				continue
			case bertSpaceClass:
				r = ' '
			}
			b.WriteByte(byte(r))
			continue
		}
		ascii = false
		switch {
		case bertDrop.has(r):
			continue
		case bertSpace.has(r):
			b.WriteByte(' ')
		case bertChinese.has(r):
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	s := b.String()
	if ascii {
		if w.lowercase {
			s = strings.ToLower(s)
		}
		return s
	}
	if w.stripAccents {
		s = stripAccents(s)
	}
	if w.lowercase {
		s = lowercase(s)
	}
	return s
}

// stripAccents is HF's strip_accents: NFD, then every nonspacing mark removed.
func stripAccents(s string) string {
	out := make([]byte, 0, len(s)+8)
	start := 0
	for i, r := range s {
		if r >= 0x10000 && bertNFDKeep.has(r) {
			out = norm.NFD.AppendString(out, s[start:i])
			out = utf8.AppendRune(out, r)
			start = i + utf8.RuneLen(r)
		}
	}
	out = norm.NFD.AppendString(out, s[start:])
	kept := out[:0]
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRune(out[i:])
		if r < 0x300 || !bertMn.has(r) {
			kept = append(kept, out[i:i+n]...)
		}
		i += n
	}
	return string(kept)
}

// lowercase is HF's Lowercase normaliser: Rust's char::to_lowercase on each character
// (no context: a final capital sigma becomes σ, not ς).
func lowercase(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < utf8.RuneSelf {
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			}
			b.WriteByte(byte(r))
		} else if l, ok := bertLower.get(r); ok {
			b.WriteString(l)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// appendText normalises and pre-tokenizes text (which holds no added token), then
// appends the WordPiece ids of each word, stopping once ids hold more than limit
// (limit > 0).
func (w *wordPiece) appendText(ids []int32, text string, limit int) []int32 {
	s := w.normalize(text)
	start := -1 // of the current word, -1 between words
	for i := 0; i < len(s); {
		r, n := rune(s[i]), 1
		class := bertOther
		if r < utf8.RuneSelf {
			class = bertASCII[r]
		} else {
			r, n = utf8.DecodeRuneInString(s[i:])
			switch {
			case bertWhite.has(r):
				class = bertSpaceClass
			case bertPunct.has(r):
				class = bertPunctClass
			}
		}
		if class == bertOther {
			if start < 0 {
				start = i
			}
			i += n
			continue
		}
		if start >= 0 {
			ids = w.appendWord(ids, s[start:i])
			start = -1
		}
		if class == bertPunctClass {
			ids = w.appendWord(ids, s[i:i+n])
		}
		i += n
		if limit > 0 && len(ids) > limit {
			return ids
		}
	}
	if start >= 0 {
		ids = w.appendWord(ids, s[start:])
	}
	return ids
}

// appendWord appends the ids of one word: at each position the longest vocabulary
// token (word-initial tokens carry the phantom space), or one [UNK] for the whole word
// when some position has none or the word is longer than maxWordChars.
func (w *wordPiece) appendWord(ids []int32, word string) []int32 {
	if utf8.RuneCountInString(word) > maxWordChars {
		return append(ids, w.unk)
	}
	key := phantomSpace + word // key[0:len(phantomSpace)+end] is the word-initial form
	n0 := len(ids)
	for start := 0; start < len(word); {
		end := min(len(word), start+w.maxTokenLen)
		for ; end > start; end-- {
			if end < len(word) && !utf8.RuneStart(word[end]) {
				continue
			}
			var sub string
			if start == 0 {
				sub = key[:len(phantomSpace)+end]
			} else if sub = word[start:end]; strings.HasPrefix(sub, phantomSpace) {
				// "##▁b" in vocab.txt would be stored as "▁b", the form of the word
				// "b"; no BERT vocabulary has such a token, so none can match here.
				continue
			}
			if id, ok := w.t.ids.find(&w.t.tokens, sub); ok && w.t.types[id] != TokenControl && w.t.types[id] != TokenUnused {
				ids = append(ids, id)
				break
			}
		}
		if end == start {
			return append(ids[:n0], w.unk)
		}
		start = end
	}
	return ids
}

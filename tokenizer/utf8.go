package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// toValidUTF8 returns s with each maximal subpart of an ill-formed sequence replaced by
// one U+FFFD: the "substitution of maximal subparts" practice of Unicode (chapter 3,
// U+FFFD substitution), which Rust's String::from_utf8_lossy and the WHATWG decoder
// follow. So "\xE2\x82(" (a truncated three-byte sequence) becomes "\uFFFD(", while
// "\xFF\xFE" becomes two U+FFFD. Go's strings.ToValidUTF8 would merge runs instead and
// per-byte decoding would split truncated sequences; neither is what HF-side tools see.
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || w != 1 {
			b.WriteString(s[i : i+w])
			i += w
			continue
		}
		b.WriteRune(utf8.RuneError)
		i += maximalSubpart(s[i:])
	}
	return b.String()
}

// maximalSubpart returns the length (1 to 3) of the longest prefix of s, which starts
// with an ill-formed sequence, that is a prefix of some well-formed sequence; a byte
// that cannot start one counts as 1.
func maximalSubpart(s string) int {
	lo, hi := byte(0x80), byte(0xBF) // allowed range of the second byte
	var need int                     // continuation bytes a complete sequence has
	switch c := s[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 1; k <= need && k < len(s); k++ {
		c := s[k]
		if k == 1 && (c < lo || c > hi) || k > 1 && (c < 0x80 || c > 0xBF) {
			break
		}
		n++
	}
	return n
}

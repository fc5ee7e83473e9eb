package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Qwen2's pre-tokenizer (tokenizer.json: Split, behaviour Isolated) cuts text into the
// matches of
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// HF runs it with Oniguruma. Go's regexp has no lookahead, so nextPiece reproduces the
// leftmost-first match by hand. At a position, the first alternative that matches wins,
// and each quantifier is greedy with backtracking; worked out per alternative:
//
//  1. an apostrophe and s, t, re, ve, m, ll or d in any case. Oniguruma folds case by
//     Unicode's simple folding, so U+017F LATIN SMALL LETTER LONG S counts as s;
//     no other code point folds to one of these letters;
//  2. a run of letters, optionally preceded by one character that is not \r, \n, a
//     letter or a number (so " word", "(word", "\tword" are one piece);
//  3. one number character (digits are never grouped);
//  4. an optional ASCII space, then a run of characters that are neither whitespace,
//     letters nor numbers, then any \r and \n that follow;
//  5. \s*[\r\n]+: within the run of whitespace starting here, everything up to and
//     including its last \r or \n;
//  6. \s+(?!\S): a whitespace run without newlines that reaches the end of the text
//     is taken whole; one followed by something else gives its last character back,
//     which then starts the next piece (typically " word" through alternative 2);
//  7. \s+: what alternative 6 cannot take, a single whitespace character before a
//     non-space.
//
// Every character matches one of 2, 3, 4 or 5-7, so the pieces cover the text.
// \p{L} is Unicode general category L (unicode.IsLetter), \p{N} is N
// (unicode.IsNumber), and Oniguruma's Unicode \s is U+0009-U+000D, U+0085 and the
// Zs, Zl and Zp categories, which is exactly unicode.IsSpace. Classification follows
// Go's Unicode tables, which may differ from HF's for code points assigned in very
// recent Unicode versions.

// class is a character's role in the pre-tokenizer regex.
type class uint8

const (
	clOther   class = iota // none of the below: [^\s\p{L}\p{N}]
	clLetter               // \p{L}
	clNumber               // \p{N}
	clSpace                // \s other than \r and \n
	clNewline              // \r or \n
)

var asciiClass [utf8.RuneSelf]class

func init() {
	for c := 0; c < utf8.RuneSelf; c++ {
		asciiClass[c] = classOfSlow(rune(c))
	}
}

func classOfSlow(r rune) class {
	switch {
	case r == '\r' || r == '\n':
		return clNewline
	case unicode.IsLetter(r):
		return clLetter
	case unicode.IsNumber(r):
		return clNumber
	case unicode.IsSpace(r):
		return clSpace
	}
	return clOther
}

// at decodes the character at s[i:]; s must be valid UTF-8 and i < len(s).
func at(s string, i int) (rune, class, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return r, classOfSlow(r), w
}

// nextPiece returns the end of the pre-token that starts at s[i:]. s must be valid
// UTF-8 and i < len(s); the result is always greater than i.
func nextPiece(s string, i int) int {
	r, cl, w := at(s, i)
	if r == '\'' {
		if n := contraction(s, i+1); n > 0 {
			return i + 1 + n
		}
	}
	switch cl {
	case clLetter:
		return scanClass(s, i+w, clLetter)
	case clNumber:
		return i + w
	}
	j := i + w
	if j < len(s) {
		_, next, nw := at(s, j)
		if next == clLetter && cl != clNewline {
			return scanClass(s, j+nw, clLetter)
		}
		if r == ' ' && next == clOther {
			return scanNewlines(s, scanClass(s, j+nw, clOther))
		}
	}
	if cl == clOther {
		return scanNewlines(s, scanClass(s, j, clOther))
	}

	// A whitespace run: alternatives 5, 6 and 7.
	lastNL := -1
	if cl == clNewline {
		lastNL = i
	}
	end, last, count := j, i, 1
	for end < len(s) {
		_, c, cw := at(s, end)
		if c != clSpace && c != clNewline {
			break
		}
		if c == clNewline {
			lastNL = end
		}
		last = end
		count++
		end += cw
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1 // \r and \n are one byte each
	case end == len(s) || count == 1:
		return end
	default:
		return last
	}
}

// contraction returns the length in bytes of the contraction suffix ("s", "LL", ...)
// at s[k:], or 0 if there is none.
func contraction(s string, k int) int {
	if k >= len(s) {
		return 0
	}
	// c|0x20 lowers an ASCII letter and maps no other byte onto a letter used here.
	switch s[k] | 0x20 {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if k+1 < len(s) && s[k+1]|0x20 == 'e' {
			return 2
		}
	case 'l':
		if k+1 < len(s) && s[k+1]|0x20 == 'l' {
			return 2
		}
	}
	if len(s)-k >= 2 && s[k] == 0xC5 && s[k+1] == 0xBF { // U+017F, folds to 's'
		return 2
	}
	return 0
}

// scanClass returns the end of the run of class-cl characters starting at s[i:].
func scanClass(s string, i int, cl class) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiClass[c] != cl {
				return i
			}
			i++
			continue
		}
		_, c, w := at(s, i)
		if c != cl {
			return i
		}
		i += w
	}
	return i
}

// scanNewlines returns the end of the run of \r and \n starting at s[i:].
func scanNewlines(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

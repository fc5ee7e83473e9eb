package tokenizer

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// charsmap is SentencePiece's precompiled_charsmap (the normaliser of a Unigram model,
// e.g. nmt_nfkc): a double-array trie over UTF-8 bytes whose leaves index
// NUL-terminated replacement strings. The blob is a little-endian uint32 trie size in
// bytes, the trie's uint32 units, then the strings.
type charsmap struct {
	units []uint32
	repl  string
}

func parseCharsmap(b []byte) (*charsmap, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("precompiled_charsmap has %d bytes, fewer than its 4-byte header", len(b))
	}
	size := binary.LittleEndian.Uint32(b)
	if size%4 != 0 || uint64(size)+4 > uint64(len(b)) || size == 0 {
		return nil, fmt.Errorf("precompiled_charsmap's trie size %d does not fit its %d bytes", size, len(b))
	}
	c := &charsmap{units: make([]uint32, size/4), repl: string(b[4+size:])}
	for i := range c.units {
		c.units[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return c, nil
}

func unitOffset(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }

// shortestPrefix is the replacement of the shortest key that is a prefix of chunk:
// the first result of the double array's common-prefix search, which is what HF's
// Precompiled normaliser uses (SentencePiece itself takes the longest).
func (c *charsmap) shortestPrefix(chunk string) (string, bool) {
	pos := unitOffset(c.units[0])
	for i := 0; i < len(chunk); i++ {
		b := chunk[i]
		if b == 0 {
			break
		}
		pos ^= uint32(b)
		if int(pos) >= len(c.units) {
			return "", false
		}
		u := c.units[pos]
		if u&(1<<31|0xFF) != uint32(b) {
			return "", false
		}
		pos ^= unitOffset(u)
		if (u>>8)&1 == 1 {
			if int(pos) >= len(c.units) {
				return "", false
			}
			return c.replacement(c.units[pos] & (1<<31 - 1))
		}
	}
	return "", false
}

func (c *charsmap) replacement(at uint32) (string, bool) {
	if int(at) >= len(c.repl) {
		return "", false
	}
	s := c.repl[at:]
	if end := strings.IndexByte(s, 0); end >= 0 {
		s = s[:end]
	}
	return s, true
}

// normalize is HF's Precompiled normaliser, which works grapheme by grapheme: a
// grapheme shorter than 6 bytes whose start matches a key is replaced whole by that
// key's replacement; otherwise each character is replaced if it starts with a key.
// (HF's comment calls this weird but verified against XNLI for XLM-R, mBART and
// Marian; it differs from SentencePiece, which takes the longest match over bytes.)
func (c *charsmap) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	state := -1
	for rest := s; rest != ""; {
		var g string
		g, rest, _, state = uniseg.FirstGraphemeClusterInString(rest, state)
		if len(g) < 6 {
			if r, ok := c.shortestPrefix(g); ok {
				b.WriteString(r)
				continue
			}
		}
		for i := 0; i < len(g); {
			_, n := utf8.DecodeRuneInString(g[i:])
			if r, ok := c.shortestPrefix(g[i : i+n]); ok {
				b.WriteString(r)
			} else {
				b.WriteString(g[i : i+n])
			}
			i += n
		}
	}
	return b.String()
}

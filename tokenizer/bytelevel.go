package tokenizer

// Byte-level BPE (GPT-2, and Qwen after it) stores every token as a string of printable
// stand-ins, one rune per byte, so that a vocabulary of arbitrary bytes survives JSON
// and GGUF string fields. Bytes that are printable Latin-1 stand for themselves; the
// other 68 bytes are moved to U+0100 and up, in byte order. A space is therefore 'Ġ'
// (U+0120) and a newline 'Ċ' (U+010A).
//
// The tokenizer converts each vocabulary string back to its bytes once, in New, and
// from then on works on raw bytes only.

// byteToRune is GPT-2's bytes_to_unicode table.
var byteToRune [256]rune

// runeToByte inverts byteToRune; runes outside the table are absent.
var runeToByte = make(map[rune]byte, 256)

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode returns the bytes a byte-level token string stands for, and false if
// a rune in it is not one of the 256 stand-ins.
func byteLevelDecode(s string) ([]byte, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := runeToByte[r]
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

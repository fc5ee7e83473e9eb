package tokenizer

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// FuzzEncode checks, for any input, that Encode does not panic and produces only ids
// that Decode accepts and that are never control tokens; and, for text holding no
// user-defined token literal, that Decode(Encode(s)) is the NFC form of s (after
// invalid UTF-8 is replaced as Encode documents).
//
//	go test ./tokenizer -run '^$' -fuzz FuzzEncode -fuzztime 60s
//
// The seed corpus is in testdata/fuzz/FuzzEncode; the parity texts are seeds as well.
func FuzzEncode(f *testing.F) {
	tok := qwenTokenizer(f)
	var userDefined []string
	for id, typ := range tok.types {
		if typ == TokenUserDefined {
			userDefined = append(userDefined, tok.tokens.at(int32(id)))
		}
	}
	for _, e := range loadParity(f) {
		if len(e.Text) < 2000 {
			f.Add(e.Text)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() || tok.types[id] == TokenControl || tok.types[id] == TokenUnused {
				t.Fatalf("Encode(%q) produced id %d", s, id)
			}
		}
		got, err := tok.Decode(ids)
		if err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", s, err)
		}
		// Invalid UTF-8 is repaired first; control-token literals are plain text.
		// Only a user-defined literal splits the text into separately normalised
		// stretches, so only then can the whole-text NFC differ (e.g. "<think>" then
		// U+0338 would compose '>' into U+226F).
		valid := toValidUTF8(s)
		if containsAny(valid, userDefined) {
			return
		}
		if want := norm.NFC.String(valid); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	})
}

func containsAny(s string, literals []string) bool {
	for _, l := range literals {
		if strings.Contains(s, l) {
			return true
		}
	}
	return false
}

// FuzzEncodeSPMBPE checks the SentencePiece BPE tokenizer (testdata/spm-bpe-vocab.gguf)
// for any input: no panic, no control, unknown or unused id, Decode(Encode(s)) is s
// with invalid UTF-8 replaced and "▁" read as a space (there is no normaliser and byte
// fallback covers every character), and EncodeLimit's ids are Encode's first ones.
//
//	go test ./tokenizer -run '^$' -fuzz FuzzEncodeSPMBPE -fuzztime 60s
func FuzzEncodeSPMBPE(f *testing.F) {
	tok := spmBPETokenizer(f)
	for _, e := range loadParityEntries(f, "parity-spm-bpe.json") {
		if len(e) < 2000 {
			f.Add(e)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("Encode(%q) produced id %d", s, id)
			}
			switch tok.types[id] {
			case TokenControl, TokenUnknown, TokenUnused:
				t.Fatalf("Encode(%q) produced id %d of type %d", s, id, tok.types[id])
			}
		}
		got, err := tok.Decode(ids)
		if err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", s, err)
		}
		if want := strings.ReplaceAll(toValidUTF8(s), phantomSpace, " "); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
		limit := len(ids) / 2
		if limited, complete := tok.EncodeLimit(s, limit); limit > 0 && (complete || len(limited) <= limit || !slices.Equal(limited, ids[:len(limited)])) {
			t.Fatalf("EncodeLimit(%q, %d) = %v, %v; want more than %d of Encode's first ids %v", s, limit, limited, complete, limit, ids)
		}
	})
}

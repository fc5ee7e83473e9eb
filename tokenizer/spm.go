package tokenizer

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/embed-stack/embed-stack/gguf"
)

// WordPieceVocab is a BERT vocabulary as llama.cpp's converter stores it in a GGUF
// (tokenizer.ggml.model "bert"): a token that starts a word carries a leading "▁"
// ("▁the"), a continuation is stored without vocab.txt's "##" ("ing"), and control
// tokens ([CLS], [SEP], ...) are their literal text.
type WordPieceVocab struct {
	Tokens []string
	Types  []int32
	UNK    int32 // the id of [UNK]
	// Lowercase is BertNormalizer's lowercase, for uncased models; StripAccents its
	// strip_accents, which HF takes from Lowercase when tokenizer.json leaves it null.
	Lowercase, StripAccents bool
}

// UnigramVocab is a SentencePiece Unigram vocabulary as GGUF stores it
// (tokenizer.ggml.model "t5"): tokens, their log-probability scores and types, and
// the normaliser's settings.
type UnigramVocab struct {
	Tokens []string
	Scores []float32
	Types  []int32
	UNK    int32
	// Charsmap is tokenizer.ggml.precompiled_charsmap (empty: no normalisation).
	Charsmap []byte
	// AddSpacePrefix prepends "▁" to the text (Metaspace's prepend_scheme "always");
	// RemoveExtraWhitespaces collapses runs of spaces into one.
	AddSpacePrefix, RemoveExtraWhitespaces bool
}

// Token types of SentencePiece vocabularies besides those of byte-level BPE.
const (
	TokenUnknown int32 = 2 // <unk>
	TokenByte    int32 = 6 // <0x0A>: byte fallback (SentencePiece BPE); Decode writes the byte
)

// newSentenceTokenizer builds the parts WordPiece, Unigram and SentencePiece BPE
// tokenizers share:
// the token table and index, the added-token matcher (control tokens stay text,
// user-defined ones are cut out) and the pieces Decode writes, where a "▁" is a space.
func newSentenceTokenizer(kind gguf.VocabType, tokens []string, types []int32, unk int32) (*Tokenizer, error) {
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: the vocabulary has no tokens")
	}
	if n > 1<<31-1 {
		return nil, fmt.Errorf("tokenizer: the vocabulary has %d tokens; ids are int32", n)
	}
	if len(types) != n {
		return nil, fmt.Errorf("tokenizer: the vocabulary has %d tokens but %d token types", n, len(types))
	}
	if unk < 0 || int(unk) >= n {
		return nil, fmt.Errorf("tokenizer: the unknown token id %d is outside the vocabulary (0 to %d)", unk, n-1)
	}
	t := &Tokenizer{
		tokens:  newStrtab(n, func(i int) string { return tokens[i] }),
		types:   slices.Clone(types),
		ids:     newTokenIndex(n),
		kind:    kind,
		special: noSpecial,
	}
	t.special.UNK = unk
	var added []addedToken
	for i, tok := range tokens {
		// A repeated form (the converter maps vocab.txt's "##" to "") keeps its
		// first id, as lookups by text can only ever find one.
		t.ids.insert(&t.tokens, int32(i))
		switch typ := types[i]; typ {
		case TokenNormal, TokenUnknown, TokenUnused, TokenByte:
		case TokenControl, TokenUserDefined:
			if tok == "" {
				return nil, fmt.Errorf("tokenizer: token %d has type %d and is empty", i, typ)
			}
			added = append(added, addedToken{text: tok, id: int32(i), control: typ == TokenControl})
		default:
			return nil, fmt.Errorf("tokenizer: token %d %q has type %d, which is not a llama.cpp token type (1 to 6)", i, tok, typ)
		}
	}
	t.added = newAddedMatcher(added)
	t.pieces = newStrtab(n, func(i int) string {
		switch types[i] {
		case TokenNormal, TokenUserDefined:
			return strings.ReplaceAll(tokens[i], phantomSpace, " ")
		case TokenByte:
			// <0x0A> stands for the byte 0x0A (byte fallback).
			var b byte
			if _, err := fmt.Sscanf(tokens[i], "<0x%02X>", &b); err == nil && len(tokens[i]) == 6 {
				return string([]byte{b})
			}
		}
		return tokens[i]
	})
	return t, nil
}

// NewWordPiece builds a BERT tokenizer: HF's BertNormalizer, BertPreTokenizer and
// WordPiece (see wordpiece.go).
func NewWordPiece(v WordPieceVocab) (*Tokenizer, error) {
	t, err := newSentenceTokenizer(gguf.VocabWPM, v.Tokens, v.Types, v.UNK)
	if err != nil {
		return nil, err
	}
	w := &wordPiece{t: t, unk: v.UNK, lowercase: v.Lowercase, stripAccents: v.StripAccents}
	for _, tok := range v.Tokens {
		w.maxTokenLen = max(w.maxTokenLen, len(tok))
	}
	t.enc = w
	return t, nil
}

// NewUnigram builds a SentencePiece Unigram tokenizer (see unigram.go).
func NewUnigram(v UnigramVocab) (*Tokenizer, error) {
	if len(v.Scores) != len(v.Tokens) {
		return nil, fmt.Errorf("tokenizer: the vocabulary has %d tokens but %d scores", len(v.Tokens), len(v.Scores))
	}
	t, err := newSentenceTokenizer(gguf.VocabUGM, v.Tokens, v.Types, v.UNK)
	if err != nil {
		return nil, err
	}
	u := &unigram{t: t, scores: slices.Clone(v.Scores), unk: v.UNK, addPrefix: v.AddSpacePrefix, collapseSpaces: v.RemoveExtraWhitespaces}
	if len(v.Charsmap) > 0 {
		if u.charsmap, err = parseCharsmap(v.Charsmap); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	// HF's unknown score is the lowest score of its vocabulary (every entry but the
	// converter's unused padding) minus the penalty.
	lowest := math.Inf(1)
	for i, s := range v.Scores {
		if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return nil, fmt.Errorf("tokenizer: token %d %q has score %v", i, v.Tokens[i], s)
		}
		if v.Types[i] != TokenUnused {
			lowest = min(lowest, float64(s))
		}
		if u.matchable(int32(i)) {
			u.maxTokenLen = max(u.maxTokenLen, len(v.Tokens[i]))
		}
	}
	if math.IsInf(lowest, 1) {
		return nil, fmt.Errorf("tokenizer: the vocabulary has only unused tokens")
	}
	u.unkScore = lowest - unkPenalty
	t.enc = u
	return t, nil
}

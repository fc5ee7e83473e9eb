package tokenizer

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"

	"github.com/embed-stack/embed-stack/gguf"
)

// Token types, as GGUF's tokenizer.ggml.token_type stores them (llama.cpp's
// llama_token_type). A byte-level BPE vocabulary uses only these four.
const (
	TokenNormal      int32 = 1 // an ordinary BPE token, stored in byte-level form
	TokenControl     int32 = 3 // e.g. <|endoftext|>: never produced from text
	TokenUserDefined int32 = 4 // e.g. <think>: cut out of text as one id
	TokenUnused      int32 = 5 // padding up to the model's vocabulary size
)

// Vocab is a byte-level BPE vocabulary as GGUF stores it: tokenizer.ggml.tokens,
// tokenizer.ggml.token_type and tokenizer.ggml.merges. Token i has id i. Normal tokens
// are in byte-level form ("Ġthe" for " the"); control and user-defined tokens are their
// literal text. Each merge is the two parts separated by one space ("Ġ t").
type Vocab struct {
	Tokens []string
	Types  []int32
	Merges []string
}

// Tokenizer encodes text to Qwen3 token ids and back. It is immutable after New apart
// from an internal bounded cache, and safe for concurrent use.
type Tokenizer struct {
	tokens strtab // as stored in the Vocab, for TokenID
	types  []int32
	pieces strtab // the bytes each id decodes to ("" for unused ids)
	ids    tokenIndex
	bpe    *bpe
	added  addedMatcher
	cache  *wordCache // nil disables caching (benchmarks compare both)
	// enc encodes text between added tokens for WordPiece and Unigram vocabularies;
	// nil for byte-level BPE, which bpe and cache do.
	enc interface {
		appendText(ids []int32, text string, limit int) []int32
	}
	kind    gguf.VocabType // VocabBPE, VocabWPM or VocabUGM
	special Special
}

// Special is the special tokens a model wraps its input in, from the GGUF; -1 where
// the model has none. Encode never adds them: that is routing's policy. As llama.cpp
// reads them: a BERT input is CLS (its BOS slot) + text + SEP (AddBOS, AddSEP); an
// XLM-R input BOS + text + EOS, as its GGUF's add_bos_token and add_eos_token say.
type Special struct {
	BOS, EOS, CLS, SEP, UNK, PAD int32
	AddBOS, AddEOS, AddSEP       bool
}

// New validates v and builds a Tokenizer from it. It refuses a vocabulary it could
// not reproduce HF's results with: mismatched lengths, duplicate tokens, a normal
// token that is not in byte-level form, a missing single-byte token, or a merge whose
// parts or result are not normal tokens.
func New(v Vocab) (*Tokenizer, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: the vocabulary has no tokens")
	}
	if n > 1<<31-1 {
		return nil, fmt.Errorf("tokenizer: the vocabulary has %d tokens; ids are int32", n)
	}
	if len(v.Types) != n {
		return nil, fmt.Errorf("tokenizer: the vocabulary has %d tokens but %d token types", n, len(v.Types))
	}
	t := &Tokenizer{
		tokens:  newStrtab(n, func(i int) string { return v.Tokens[i] }),
		types:   slices.Clone(v.Types), // the caller keeps v; t must not change under it
		ids:     newTokenIndex(n),
		bpe:     &bpe{merges: newMergeTable(len(v.Merges))},
		cache:   newWordCache(cacheCapacity),
		kind:    gguf.VocabBPE,
		special: noSpecial,
	}
	pieces := make([]string, n) // until they are packed into t.pieces
	var added []addedToken
	for i, tok := range v.Tokens {
		id := int32(i)
		if prev, ok := t.ids.insert(&t.tokens, id); !ok {
			return nil, fmt.Errorf("tokenizer: token %d %q duplicates token %d", i, tok, prev)
		}
		switch typ := v.Types[i]; typ {
		case TokenNormal:
			b, ok := byteLevelDecode(tok)
			if !ok || len(b) == 0 {
				return nil, fmt.Errorf("tokenizer: normal token %d %q is not in byte-level form; is this a byte-level BPE (gpt2) vocabulary?", i, tok)
			}
			pieces[i] = string(b)
		case TokenControl, TokenUserDefined:
			if tok == "" {
				return nil, fmt.Errorf("tokenizer: token %d has type %d and is empty", i, typ)
			}
			pieces[i] = tok
			added = append(added, addedToken{text: tok, id: id, control: typ == TokenControl})
		case TokenUnused:
		default:
			return nil, fmt.Errorf("tokenizer: token %d %q has type %d; a byte-level BPE vocabulary has only types 1 (normal), 3 (control), 4 (user-defined) and 5 (unused)", i, tok, typ)
		}
	}
	t.added = newAddedMatcher(added)
	t.pieces = newStrtab(n, func(i int) string { return pieces[i] })

	for b := 0; b < 256; b++ {
		s := string(byteToRune[b])
		id, ok := t.ids.find(&t.tokens, s)
		if !ok || t.types[id] != TokenNormal {
			return nil, fmt.Errorf("tokenizer: the vocabulary has no normal token %q for byte 0x%02X, so some text could not be encoded", s, b)
		}
		t.bpe.byteIDs[b] = id
	}

	for rank, m := range v.Merges {
		left, right, ok := strings.Cut(m, " ")
		if !ok || left == "" || right == "" || strings.Contains(right, " ") {
			return nil, fmt.Errorf("tokenizer: merge %d %q is not two tokens separated by one space", rank, m)
		}
		a, err := t.normalID(left)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: merge %d %q: %w", rank, m, err)
		}
		b, err := t.normalID(right)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: merge %d %q: %w", rank, m, err)
		}
		merged, err := t.normalID(left + right)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: merge %d %q: %w", rank, m, err)
		}
		if prev, ok := t.bpe.merges.add(a, b, merged); !ok {
			return nil, fmt.Errorf("tokenizer: merge %d %q repeats merge %d", rank, m, prev)
		}
	}
	return t, nil
}

func (t *Tokenizer) normalID(tok string) (int32, error) {
	id, ok := t.ids.find(&t.tokens, tok)
	if !ok {
		return 0, fmt.Errorf("%q is not in the vocabulary", tok)
	}
	if t.types[id] != TokenNormal {
		return 0, fmt.Errorf("%q is token %d of type %d, not a normal token", tok, id, t.types[id])
	}
	return id, nil
}

// noSpecial is a Special with no special tokens.
var noSpecial = Special{BOS: -1, EOS: -1, CLS: -1, SEP: -1, UNK: -1, PAD: -1}

// Kind returns the vocabulary's type: gguf.VocabBPE, VocabWPM or VocabUGM.
func (t *Tokenizer) Kind() gguf.VocabType { return t.kind }

// Special returns the model's special tokens and whether it adds BOS and EOS.
func (t *Tokenizer) Special() Special { return t.special }

// VocabSize returns the number of token ids, including added and unused ones.
func (t *Tokenizer) VocabSize() int { return t.tokens.len() }

// TokenID returns the id of a token as the vocabulary stores it: the literal text of
// an added token ("<|endoftext|>"), the byte-level form of a normal one ("Ġthe").
func (t *Tokenizer) TokenID(piece string) (int32, bool) {
	return t.ids.find(&t.tokens, piece)
}

// Encode returns the token ids of text, as HF's tokenizer gives them with
// split_special_tokens=True and without a post-processor (no end-of-text id is
// appended; that is routing's policy). Invalid UTF-8 is first replaced as the package
// documentation describes. Safe for concurrent use.
func (t *Tokenizer) Encode(text string) []int32 {
	text = toValidUTF8(text)
	ids := make([]int32, 0, len(text)/3+1)
	start := 0 // of the text not yet encoded
	for pos := 0; pos < len(text); {
		at, tok, ok := t.added.find(text, pos)
		if !ok {
			break
		}
		pos = at + len(tok.text)
		if tok.control {
			// HF finds control tokens like any added token but, splitting special
			// tokens, leaves the match in the text around it.
			continue
		}
		ids = t.appendText(ids, text[start:at])
		ids = append(ids, tok.id)
		start = pos
	}
	return t.appendText(ids, text[start:])
}

// EncodeLimit is Encode that stops once it has more than limit ids, so that a
// text far over a length limit costs what limit tokens cost, not what the whole
// text does. complete is true when text has at most limit ids, which ids then are;
// otherwise ids are more than limit of its first ids. limit <= 0 means no limit.
func (t *Tokenizer) EncodeLimit(text string, limit int) (ids []int32, complete bool) {
	if limit <= 0 {
		return t.Encode(text), true
	}
	text = toValidUTF8(text)
	ids = make([]int32, 0, min(len(text)/3, limit)+1)
	start := 0
	for pos := 0; pos < len(text); {
		at, tok, ok := t.added.find(text, pos)
		if !ok {
			break
		}
		pos = at + len(tok.text)
		if tok.control {
			continue
		}
		if ids = t.appendTextLimit(ids, text[start:at], limit); len(ids) > limit {
			return ids, false
		}
		ids = append(ids, tok.id)
		start = pos
	}
	ids = t.appendTextLimit(ids, text[start:], limit)
	return ids, len(ids) <= limit
}

// appendText appends the ids of a stretch of text that holds no added token.
func (t *Tokenizer) appendText(ids []int32, text string) []int32 {
	return t.appendTextLimit(ids, text, 0)
}

// appendTextLimit is appendText that stops once ids hold more than limit ids
// (limit > 0).
func (t *Tokenizer) appendTextLimit(ids []int32, text string, limit int) []int32 {
	if text == "" {
		return ids
	}
	if t.enc != nil {
		return t.enc.appendText(ids, text, limit)
	}
	text = norm.NFC.String(text)
	for i := 0; i < len(text); {
		j := nextPiece(text, i)
		ids = t.appendPiece(ids, text[i:j])
		i = j
		if limit > 0 && len(ids) > limit {
			break
		}
	}
	return ids
}

func (t *Tokenizer) appendPiece(ids []int32, piece string) []int32 {
	if len(piece) == 1 {
		return append(ids, t.bpe.byteIDs[piece[0]])
	}
	if len(piece) > maxCachedWord || t.cache == nil {
		return t.bpe.appendWord(ids, piece)
	}
	if cached, ok := t.cache.get(piece); ok {
		return append(ids, cached...)
	}
	n := len(ids)
	ids = t.bpe.appendWord(ids, piece)
	// The piece is a substring of the caller's text; clone it so the cache does not
	// keep whole request bodies alive.
	t.cache.put(strings.Clone(piece), append([]int32(nil), ids[n:]...))
	return ids
}

// Decode returns the text of ids: normal tokens as the bytes they stand for, control
// and user-defined tokens as their literal text. Like HF's byte-level decoder it
// replaces bytes that do not form valid UTF-8 (a multi-byte character cut between
// calls, say) by U+FFFD. It fails on an id outside the vocabulary or an unused one.
func (t *Tokenizer) Decode(ids []int32) (string, error) {
	var b strings.Builder
	for i, id := range ids {
		if id < 0 || int(id) >= t.tokens.len() {
			return "", fmt.Errorf("tokenizer: token %d is id %d, outside the vocabulary (0 to %d)", i, id, t.tokens.len()-1)
		}
		if t.types[id] == TokenUnused {
			return "", fmt.Errorf("tokenizer: token %d is id %d, an unused (padding) token %q", i, id, t.tokens.at(id))
		}
		b.WriteString(t.pieces.at(id))
	}
	return toValidUTF8(b.String()), nil
}

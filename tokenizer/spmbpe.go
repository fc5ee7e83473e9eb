package tokenizer

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/embed-stack/embed-stack/gguf"
)

// SPMBPEVocab is a SentencePiece BPE vocabulary with byte fallback as llama.cpp's
// converter stores it (tokenizer.ggml.model "llama": Gemma, EmbeddingGemma, Llama 2):
// the pieces with "▁" for a space, their scores (the higher, the earlier BPE merged
// them), their types, and whether a "▁" is prepended to the text (SentencePiece's
// add_dummy_prefix: Llama's, not Gemma's).
//
// User-defined pieces are stored as the converter writes them from
// tokenizer_config.json, with their "▁" turned into spaces and the score -1000;
// NewSPMBPE turns them back into the pieces HF's tokenizer.json holds.
type SPMBPEVocab struct {
	Tokens         []string
	Scores         []float32
	Types          []int32
	UNK            int32
	AddSpacePrefix bool
}

// spmBPE is the text pipeline transformers' converters write into the tokenizer.json
// of a SentencePiece BPE model: GemmaConverter's Replace(" ", "▁") (LlamaConverter's
// legacy form first prepends "▁" to each stretch between added tokens), a
// pre-tokenizer that splits nothing (Gemma's Split(" ") runs after the spaces are
// gone; Llama's has none), and BPE with byte fallback over merges made from the piece
// scores (transformers' generate_merges), applied by rank as HF's BPE applies them.
type spmBPE struct {
	t         *Tokenizer
	merges    mergeTable
	byteIDs   [256]int32 // the <0xNN> tokens; byteFallback is false unless all exist
	byteFall  bool
	unk       int32
	addPrefix bool
	// splits says that no token HF may produce holds a "▁" after another character,
	// so no merge crosses the start of a run of "▁" after other text, and a text can
	// be merged run by run (and cut short by EncodeLimit) with the same result.
	splits  bool
	cache   *wordCache
	scratch sync.Pool // *bpeScratch
}

// NewSPMBPE builds a SentencePiece BPE tokenizer (see spmBPE).
func NewSPMBPE(v SPMBPEVocab) (*Tokenizer, error) {
	n := len(v.Tokens)
	if len(v.Scores) != n {
		return nil, fmt.Errorf("tokenizer: the vocabulary has %d tokens but %d scores", n, len(v.Scores))
	}
	if len(v.Types) != n {
		return nil, fmt.Errorf("tokenizer: the vocabulary has %d tokens but %d token types", n, len(v.Types))
	}
	tokens := slices.Clone(v.Tokens)
	for i, typ := range v.Types {
		if typ == TokenUserDefined {
			tokens[i] = strings.ReplaceAll(tokens[i], " ", phantomSpace)
		}
	}
	t, err := newSentenceTokenizer(gguf.VocabSPM, tokens, v.Types, v.UNK)
	if err != nil {
		return nil, err
	}
	s := &spmBPE{t: t, unk: v.UNK, addPrefix: v.AddSpacePrefix, cache: newWordCache(cacheCapacity)}
	s.byteFall = true
	for b := range 256 {
		id, ok := t.ids.find(&t.tokens, fmtByte(byte(b)))
		if !ok || t.types[id] != TokenByte {
			s.byteFall = false
			break
		}
		s.byteIDs[b] = id
	}
	for i, sc := range v.Scores {
		if math.IsNaN(float64(sc)) || math.IsInf(float64(sc), 0) {
			return nil, fmt.Errorf("tokenizer: token %d %q has score %v", i, tokens[i], sc)
		}
	}
	s.buildMerges(tokens, v.Scores)
	t.enc = s
	return t, nil
}

// produces says whether HF's BPE may give id for text: control, unknown and unused
// tokens never (package doc), everything else (normal, user-defined and byte tokens).
func (s *spmBPE) produces(id int32) bool {
	switch s.t.types[id] {
	case TokenControl, TokenUnknown, TokenUnused:
		return false
	}
	return true
}

// symbolID is the id HF's BPE starts a character (or a part of a piece) with: the
// token of that text, or, for a tab, the byte token <0x09> where the vocabulary has no
// "\t" (GemmaConverter renames <0x09> to "\t" for Gemma's merges over tabs).
func (s *spmBPE) symbolID(text string) (int32, bool) {
	if id, ok := s.t.ids.find(&s.t.tokens, text); ok {
		return id, true
	}
	if text == "\t" && s.byteFall {
		return s.byteIDs['\t'], true
	}
	return 0, false
}

// buildMerges makes the merge list as transformers' generate_merges does from the
// vocabulary and scores: a pair of pieces whose concatenation is a piece, ranked by
// that piece's score (highest first), then the longer left part, the longer right
// part (in characters), then the piece's id and the parts' ids. A user-defined piece
// scores 0 as in the SentencePiece model (the GGUF's -1000 is the converter's).
func (s *spmBPE) buildMerges(tokens []string, scores []float32) {
	type merge struct {
		score        float32
		llen, rlen   int
		id, lid, rid int32
	}
	var list []merge
	s.splits = true
	for i, tok := range tokens {
		id := int32(i)
		if !s.produces(id) {
			continue
		}
		score := scores[i]
		if s.t.types[i] == TokenUserDefined {
			score = 0
		}
		llen := 0
		for k := range tok {
			if k == 0 {
				continue
			}
			llen++
			lid, ok := s.symbolID(tok[:k])
			if !ok {
				continue
			}
			rid, ok := s.symbolID(tok[k:])
			if !ok {
				continue
			}
			list = append(list, merge{score: score, llen: llen, rlen: utf8.RuneCountInString(tok[k:]), id: id, lid: lid, rid: rid})
		}
		if strings.Contains(strings.TrimLeft(tok, phantomSpace), phantomSpace) {
			s.splits = false
		}
	}
	slices.SortFunc(list, func(a, b merge) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(b.llen, a.llen), cmp.Compare(b.rlen, a.rlen),
			cmp.Compare(a.id, b.id), cmp.Compare(a.lid, b.lid), cmp.Compare(a.rid, b.rid))
	})
	s.merges = newMergeTable(len(list))
	for _, m := range list {
		s.merges.add(m.lid, m.rid, m.id)
	}
}

func (s *spmBPE) appendText(ids []int32, text string, limit int) []int32 {
	if s.addPrefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", phantomSpace)
	if !s.splits {
		return s.appendWord(ids, text)
	}
	// Cut before each run of "▁" that follows other text.
	for start := 0; start < len(text); {
		end := len(text)
		for i := start; i < len(text); {
			r, k := utf8.DecodeRuneInString(text[i:])
			if r != '▁' && strings.HasPrefix(text[i+k:], phantomSpace) {
				end = i + k
				break
			}
			i += k
		}
		ids = s.appendWord(ids, text[start:end])
		start = end
		if limit > 0 && len(ids) > limit {
			break
		}
	}
	return ids
}

// appendWord appends the ids of one stretch of normalised text, through the word
// cache when it is short.
func (s *spmBPE) appendWord(ids []int32, word string) []int32 {
	if len(word) > maxCachedWord {
		return s.mergeWord(ids, word)
	}
	if cached, ok := s.cache.get(word); ok {
		return append(ids, cached...)
	}
	n := len(ids)
	ids = s.mergeWord(ids, word)
	s.cache.put(strings.Clone(word), slices.Clone(ids[n:]))
	return ids
}

// mergeWord is HF's BPE::merge_word and merge_all: each character starts as its token,
// or as the byte tokens of its UTF-8 when it has none, or as the unknown token (a run
// of unknown characters fused into one) when the vocabulary has no byte tokens; then
// the merges are applied by rank.
func (s *spmBPE) mergeWord(dst []int32, word string) []int32 {
	sc, _ := s.scratch.Get().(*bpeScratch)
	if sc == nil {
		sc = &bpeScratch{}
	}
	syms := sc.syms[:0]
	add := func(id int32) {
		syms = append(syms, symbol{id: id, prev: int32(len(syms) - 1), next: int32(len(syms) + 1)})
	}
	for i := 0; i < len(word); {
		_, k := utf8.DecodeRuneInString(word[i:])
		switch id, ok := s.symbolID(word[i : i+k]); {
		case ok && s.produces(id):
			add(id)
		case s.byteFall:
			for j := i; j < i+k; j++ {
				add(s.byteIDs[word[j]])
			}
		case len(syms) > 0 && syms[len(syms)-1].id == s.unk:
		default:
			add(s.unk)
		}
		i += k
	}
	if len(syms) == 0 {
		return dst
	}
	syms[len(syms)-1].next = -1
	h := mergeAll(syms, &s.merges, candidateHeap(sc.heap[:0]))
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.syms, sc.heap = syms, h
	if cap(sc.syms) <= 4096 {
		s.scratch.Put(sc)
	}
	return dst
}

// fmtByte is the piece of a byte-fallback token: <0x0A>.
func fmtByte(b byte) string { return fmt.Sprintf("<0x%02X>", b) }

package tokenizer

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/embed-stack/embed-stack/gguf"
)

// GGUF metadata keys of a tokenizer, as llama.cpp's converter writes them.
const (
	keyModel  = gguf.KeyTokenizerModel
	keyPre    = "tokenizer.ggml.pre"
	keyTokens = gguf.KeyTokens
	keyTypes  = "tokenizer.ggml.token_type"
	keyMerges = "tokenizer.ggml.merges"

	keyScores        = "tokenizer.ggml.scores"
	keyCharsmap      = "tokenizer.ggml.precompiled_charsmap"
	keyUNK           = "tokenizer.ggml.unknown_token_id"
	keyAddPrefix     = "tokenizer.ggml.add_space_prefix"
	keyRemoveExtraWS = "tokenizer.ggml.remove_extra_whitespaces"
)

// qwenUserDefined are the added tokens of Qwen2.5 and Qwen3 that tokenizer.json marks
// "special": false although they are spelt like control tokens.
var qwenUserDefined = map[string]bool{
	"<|fim_prefix|>": true,
	"<|fim_middle|>": true,
	"<|fim_suffix|>": true,
	"<|fim_pad|>":    true,
	"<|repo_name|>":  true,
	"<|file_sep|>":   true,
}

// FromGGUF builds the tokenizer stored in a GGUF file's metadata, so the API server can
// tokenize with exactly the model's vocabulary without loading its weights. It
// implements the vocabulary types embedding models use (tokenizer.ggml.model):
//
//   - "gpt2", byte-level BPE, with tokenizer.ggml.pre "qwen2" (Qwen2 and Qwen3);
//   - "bert", WordPiece (BERT, MiniLM, BGE, E5 and nomic-embed-text v1);
//   - "t5", SentencePiece Unigram (XLM-R: bge-m3, multilingual-e5, nomic-embed-text
//     v2; T5);
//   - "llama", SentencePiece BPE with byte fallback (EmbeddingGemma, Gemma; Llama 2).
//
// One correction is applied to Qwen vocabularies: llama.cpp's converter
// (convert_hf_to_gguf.py, does_token_look_special) types every added token spelt <|...|>
// as control, including the six that Qwen's tokenizer.json does not call special
// (qwenUserDefined). HF cuts those out of user text as single ids, so FromGGUF types
// them user-defined again; otherwise "<|fim_prefix|>" in a request would tokenize
// differently from HF.
func FromGGUF(path string) (*Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()

	model, err := f.String(keyModel)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	var t *Tokenizer
	switch gguf.VocabType(model) {
	case gguf.VocabBPE:
		t, err = bpeFromGGUF(f)
	case gguf.VocabWPM:
		t, err = wordPieceFromGGUF(f)
	case gguf.VocabUGM:
		t, err = unigramFromGGUF(f)
	case gguf.VocabSPM:
		t, err = spmBPEFromGGUF(f)
	default:
		return nil, fmt.Errorf("tokenizer: %s: %s is %q; implemented are %q (byte-level BPE), %q (WordPiece), %q (SentencePiece Unigram) and %q (SentencePiece BPE)", path, keyModel, model, gguf.VocabBPE, gguf.VocabWPM, gguf.VocabUGM, gguf.VocabSPM)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	t.special = readSpecial(f, t)
	return t, nil
}

func bpeFromGGUF(f *gguf.File) (*Tokenizer, error) {
	pre, err := f.String(keyPre)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w (the pre-tokenizer must be named; only \"qwen2\" is implemented)", err)
	}
	if pre != "qwen2" {
		return nil, fmt.Errorf("tokenizer: %s is %q; only Qwen2/Qwen3's pre-tokenizer (\"qwen2\") is implemented", keyPre, pre)
	}
	var v Vocab
	if v.Tokens, err = f.Strings(keyTokens); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Types, err = f.Int32s(keyTypes); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Merges, err = f.Strings(keyMerges); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if len(v.Types) == len(v.Tokens) {
		for i, tok := range v.Tokens {
			if v.Types[i] == TokenControl && qwenUserDefined[tok] {
				v.Types[i] = TokenUserDefined
			}
		}
	}
	return New(v)
}

// wordPieceFromGGUF reads a "bert" vocabulary. GGUF does not say whether the model is
// cased (tokenizer.json's lowercase and strip_accents): a vocabulary with no
// uppercase letter that has a lowercase form in any normal token is uncased, as
// bert-base-uncased and its descendants are ("ℝ" has none, and is in their
// vocabulary), and is lowercased with accents stripped; otherwise neither.
func wordPieceFromGGUF(f *gguf.File) (*Tokenizer, error) {
	var v WordPieceVocab
	var err error
	if v.Tokens, err = f.Strings(keyTokens); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Types, err = f.Int32s(keyTypes); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	v.UNK = idKey(f, keyUNK, 100) // llama.cpp's default for "bert"
	v.Lowercase = uncased(v.Tokens, v.Types)
	v.StripAccents = v.Lowercase
	return NewWordPiece(v)
}

func unigramFromGGUF(f *gguf.File) (*Tokenizer, error) {
	var v UnigramVocab
	var err error
	if v.Tokens, err = f.Strings(keyTokens); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Types, err = f.Int32s(keyTypes); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Scores, err = readScores(f, "a Unigram vocabulary needs its scores"); err != nil {
		return nil, err
	}
	if cm, ok := f.Get(keyCharsmap); ok {
		switch b := cm.(type) {
		case []uint8:
			v.Charsmap = b
		case []int8:
			v.Charsmap = make([]byte, len(b))
			for i, x := range b {
				v.Charsmap[i] = byte(x)
			}
		default:
			return nil, fmt.Errorf("tokenizer: %s is not a byte array", keyCharsmap)
		}
	}
	v.UNK = idKey(f, keyUNK, 2) // llama.cpp's default for "t5"
	// llama.cpp reads both flags with a default of false.
	v.AddSpacePrefix, _ = f.Bool(keyAddPrefix)
	v.RemoveExtraWhitespaces, _ = f.Bool(keyRemoveExtraWS)
	return NewUnigram(v)
}

// spmBPEFromGGUF reads a "llama" vocabulary. llama.cpp reads add_space_prefix with a
// default of true for this type (Llama 2's dummy prefix); Gemma's converter writes
// false.
func spmBPEFromGGUF(f *gguf.File) (*Tokenizer, error) {
	var v SPMBPEVocab
	var err error
	if v.Tokens, err = f.Strings(keyTokens); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Types, err = f.Int32s(keyTypes); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Scores, err = readScores(f, "a SentencePiece BPE vocabulary needs its scores to order its merges"); err != nil {
		return nil, err
	}
	v.UNK = idKey(f, keyUNK, 0) // llama.cpp's default for "llama"
	v.AddSpacePrefix = true
	if b, err := f.Bool(keyAddPrefix); err == nil {
		v.AddSpacePrefix = b
	}
	return NewSPMBPE(v)
}

// readScores reads tokenizer.ggml.scores; why says what they are needed for.
func readScores(f *gguf.File, why string) ([]float32, error) {
	scores, ok := f.Get(keyScores)
	v, _ := scores.([]float32)
	if !ok || v == nil {
		return nil, fmt.Errorf("tokenizer: %s is missing or not a float32 array; %s", keyScores, why)
	}
	return v, nil
}

// uncased says whether no normal token has an uppercase letter with a lowercase form.
func uncased(tokens []string, types []int32) bool {
	for i, tok := range tokens {
		if i < len(types) && types[i] == TokenNormal && strings.ContainsFunc(tok, hasLowerForm) {
			return false
		}
	}
	return true
}

// hasLowerForm says whether r is an uppercase letter with a lowercase form.
func hasLowerForm(r rune) bool { return unicode.IsUpper(r) && unicode.ToLower(r) != r }

// idKey reads a token-id key, or def when the file has none.
func idKey(f *gguf.File, key string, def int32) int32 {
	if id, err := f.Uint32(key); err == nil && id <= 1<<31-1 {
		return int32(id)
	}
	return def
}

// readSpecial reads the special token ids and add flags with llama.cpp's defaults
// per vocabulary type (llama-vocab.cpp, llama_vocab::impl::load).
func readSpecial(f *gguf.File, t *Tokenizer) Special {
	s := noSpecial
	switch t.kind {
	case gguf.VocabWPM:
		s.BOS, s.UNK, s.SEP, s.PAD = 101, 100, 102, 0
		s.AddBOS, s.AddEOS, s.AddSEP = true, false, true
	case gguf.VocabUGM:
		s.EOS, s.UNK, s.PAD = 1, 2, 0
		s.AddBOS, s.AddEOS = false, true
	case gguf.VocabBPE:
		s.AddBOS, s.AddEOS = false, false
	case gguf.VocabSPM:
		s.BOS, s.EOS, s.UNK = 1, 2, 0
		s.AddBOS, s.AddEOS = true, false
	}
	s.BOS = idKey(f, "tokenizer.ggml.bos_token_id", s.BOS)
	s.EOS = idKey(f, "tokenizer.ggml.eos_token_id", s.EOS)
	s.UNK = idKey(f, keyUNK, s.UNK)
	s.SEP = idKey(f, "tokenizer.ggml.seperator_token_id", s.SEP) // sic: llama.cpp's spelling
	s.PAD = idKey(f, "tokenizer.ggml.padding_token_id", s.PAD)
	s.CLS = idKey(f, "tokenizer.ggml.cls_token_id", -1)
	if t.kind == gguf.VocabWPM && s.CLS < 0 {
		s.CLS = s.BOS // llama.cpp uses the BOS slot for [CLS]
	}
	if b, err := f.Bool("tokenizer.ggml.add_bos_token"); err == nil {
		s.AddBOS = b
	}
	if b, err := f.Bool("tokenizer.ggml.add_eos_token"); err == nil {
		s.AddEOS = b
	}
	for _, id := range []*int32{&s.BOS, &s.EOS, &s.CLS, &s.SEP, &s.UNK, &s.PAD} {
		if int(*id) >= t.VocabSize() {
			*id = -1
		}
	}
	return s
}

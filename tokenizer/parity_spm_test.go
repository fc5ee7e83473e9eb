package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// The real encoder vocabularies scripts/fetch-encoders.sh puts into .cache (make test
// runs it first).
func minilmTokenizerJSON(t testing.TB) string {
	return filepath.Join(testrepo.RootOf(t), ".cache", "minilm", "tokenizer.json")
}

func xlmrVocabGGUF(t testing.TB) string {
	return filepath.Join(testrepo.RootOf(t), ".cache", "xlmr", "ggml-vocab-nomic-bert-moe.gguf")
}

// requireFile skips the test when path is missing, or fails it when
// EMBED_STACK_REQUIRE_E2E is set (make test sets it, so a missing fetch is an error).
func requireFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if testenv.RequireE2E() {
			t.Fatalf("%s is missing; run scripts/fetch-encoders.sh", path)
		}
		t.Skipf("%s is missing; run scripts/fetch-encoders.sh (make test does)", path)
	}
}

// wordPieceVocabFromTokenizerJSON turns a BERT tokenizer.json into what llama.cpp's
// converter (BertModel.set_vocab) stores: "##x" becomes "x", any other token "▁x",
// added special tokens stay as they are, typed control.
func wordPieceVocabFromTokenizerJSON(path string) (WordPieceVocab, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return WordPieceVocab{}, err
	}
	var tj struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Normalizer struct {
			Lowercase    bool  `json:"lowercase"`
			StripAccents *bool `json:"strip_accents"`
		} `json:"normalizer"`
		Model struct {
			Type     string         `json:"type"`
			UnkToken string         `json:"unk_token"`
			Vocab    map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		return WordPieceVocab{}, err
	}
	if tj.Model.Type != "WordPiece" {
		return WordPieceVocab{}, fmt.Errorf("%s: model type %q, want WordPiece", path, tj.Model.Type)
	}
	v := WordPieceVocab{Tokens: make([]string, len(tj.Model.Vocab)), Types: make([]int32, len(tj.Model.Vocab))}
	for tok, id := range tj.Model.Vocab {
		v.Types[id] = TokenNormal
		if rest, ok := strings.CutPrefix(tok, "##"); ok {
			v.Tokens[id] = rest
		} else {
			v.Tokens[id] = phantomSpace + tok
		}
	}
	for _, a := range tj.AddedTokens {
		v.Tokens[a.ID], v.Types[a.ID] = a.Content, TokenControl
	}
	v.UNK = int32(tj.Model.Vocab[tj.Model.UnkToken])
	v.Lowercase = tj.Normalizer.Lowercase
	v.StripAccents = v.Lowercase
	if tj.Normalizer.StripAccents != nil {
		v.StripAccents = *tj.Normalizer.StripAccents
	}
	return v, nil
}

var minilm, xlmr, spmBPETok struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

func minilmTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	path := minilmTokenizerJSON(t)
	requireFile(t, path)
	minilm.once.Do(func() {
		v, err := wordPieceVocabFromTokenizerJSON(path)
		if err != nil {
			minilm.err = err
			return
		}
		minilm.tok, minilm.err = NewWordPiece(v)
	})
	if minilm.err != nil {
		t.Fatal(minilm.err)
	}
	return minilm.tok
}

func xlmrTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	path := xlmrVocabGGUF(t)
	requireFile(t, path)
	xlmr.once.Do(func() { xlmr.tok, xlmr.err = FromGGUF(path) })
	if xlmr.err != nil {
		t.Fatal(xlmr.err)
	}
	return xlmr.tok
}

type spmParity struct {
	Source           string `json:"source"`
	NormalizerSHA256 string `json:"normalizer_sha256"`
	Entries          []struct {
		Text  string  `json:"text"`
		IDs   []int32 `json:"ids"`
		HFRaw []int32 `json:"hf_raw"`
	} `json:"entries"`
}

// loadParityEntries returns the texts of a parity file, for fuzz seeds.
func loadParityEntries(t testing.TB, name string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var p spmParity
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("testdata/%s: %v", name, err)
	}
	texts := make([]string, len(p.Entries))
	for i, e := range p.Entries {
		texts[i] = e.Text
	}
	return texts
}

func loadSPMParity(t *testing.T, name string) spmParity {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("%v (tools/hf-tokenizers/parity.py writes it)", err)
	}
	var p spmParity
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("testdata/%s: %v", name, err)
	}
	if len(p.Entries) < 200 {
		t.Fatalf("testdata/%s has %d texts; the generator writes at least 200", name, len(p.Entries))
	}
	return p
}

func checkParity(t *testing.T, tok *Tokenizer, p spmParity) {
	t.Helper()
	passed, longest, deviations := 0, 0, 0
	for i, e := range p.Entries {
		got := tok.Encode(e.Text)
		if !slices.Equal(got, e.IDs) {
			t.Errorf("entry %d: Encode(%s)\n got %v\nwant %v", i, abbrev(e.Text), abbrevIDs(got), abbrevIDs(e.IDs))
			continue
		}
		if limited, complete := tok.EncodeLimit(e.Text, len(e.IDs)); !complete || !slices.Equal(limited, e.IDs) {
			t.Errorf("entry %d: EncodeLimit(%s, %d) = %v, %v; want Encode's ids, complete", i, abbrev(e.Text), len(e.IDs), abbrevIDs(limited), complete)
		}
		if e.HFRaw != nil {
			deviations++
		}
		passed++
		longest = max(longest, len(got))
	}
	if longest < 10000 {
		t.Errorf("the longest parity text has %d tokens; the set must include one of at least 10000", longest)
	}
	t.Logf("%s: %d/%d texts encode to HF's ids exactly (longest %d tokens; %d hold control-token literals that plain HF would turn into control ids)", p.Source, passed, len(p.Entries), longest, deviations)
}

// TestParityWordPiece holds the WordPiece tokenizer to HF's on the real
// all-MiniLM-L6-v2 tokenizer.json (testdata/parity-wordpiece.json).
func TestParityWordPiece(t *testing.T) {
	checkParity(t, minilmTokenizer(t), loadSPMParity(t, "parity-wordpiece.json"))
}

// TestParityUnigram holds the Unigram tokenizer to HF's on XLM-R's vocabulary read
// from llama.cpp's GGUF (testdata/parity-unigram.json).
func TestParityUnigram(t *testing.T) {
	checkParity(t, xlmrTokenizer(t), loadSPMParity(t, "parity-unigram.json"))
}

// normalizerDigest is parity.py's normalizer_sha256: every code point whose
// normalisation alone differs from it, with that normalisation.
func normalizerDigest(normalize func(string) string) string {
	h := sha256.New()
	for r := rune(0); r < 0x110000; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		c := string(r)
		if n := normalize(c); n != c {
			fmt.Fprintf(h, "%X\t%s\n", r, n)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestNormalizersEveryCodePoint compares the BERT normaliser and the precompiled
// charsmap with HF's on each of Unicode's 1,112,064 scalar values, through the digest
// the generator took from HF.
func TestNormalizersEveryCodePoint(t *testing.T) {
	if testing.Short() {
		t.Skip("about a second per normaliser")
	}
	wp := minilmTokenizer(t).enc.(*wordPiece)
	if got, want := normalizerDigest(wp.normalize), loadSPMParity(t, "parity-wordpiece.json").NormalizerSHA256; got != want {
		t.Errorf("BertNormalizer over every code point: digest %s, HF's %s", got, want)
	}
	cm := xlmrTokenizer(t).enc.(*unigram).charsmap
	if got, want := normalizerDigest(cm.normalize), loadSPMParity(t, "parity-unigram.json").NormalizerSHA256; got != want {
		t.Errorf("Precompiled over every code point: digest %s, HF's %s", got, want)
	}
	if !utf8.ValidString(cm.repl) {
		t.Errorf("the charsmap's replacements are not valid UTF-8")
	}
}

// TestWordPieceCasing checks how FromGGUF tells an uncased BERT vocabulary: the real
// MiniLM one is (though it holds "ℝ", an uppercase letter with no lowercase form); with
// one cased token it is not.
func TestWordPieceCasing(t *testing.T) {
	path := minilmTokenizerJSON(t)
	requireFile(t, path)
	v, err := wordPieceVocabFromTokenizerJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(v.Tokens, func(s string) bool { return strings.Contains(s, "ℝ") }) {
		t.Fatal("the MiniLM vocabulary has no ℝ; the test needs one")
	}
	if !uncased(v.Tokens, v.Types) {
		t.Error("the MiniLM vocabulary is read as cased")
	}
	v.Tokens[2000] = phantomSpace + "The"
	if uncased(v.Tokens, v.Types) {
		t.Error("a vocabulary holding ▁The is read as uncased")
	}
}

// TestUnigramSpecial reads XLM-R's special tokens from llama.cpp's GGUF: <s> 0, <pad>
// 1, </s> 2, <unk> 3, both added.
func TestUnigramSpecial(t *testing.T) {
	sp := xlmrTokenizer(t).Special()
	if sp.BOS != 0 || sp.PAD != 1 || sp.EOS != 2 || sp.UNK != 3 || !sp.AddBOS || !sp.AddEOS || sp.AddSEP {
		t.Errorf("Special() = %+v, want BOS 0, PAD 1, EOS 2, UNK 3, AddBOS and AddEOS", sp)
	}
}

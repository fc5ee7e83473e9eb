package llama

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/internal/testrepo"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// The encoder models `make models` writes with cmd/genmodel (issue 25): BERT shapes
// with random weights and real vocabularies, and the real all-MiniLM-L6-v2 converted.
const (
	bertTinyModel  = "models/bert-tiny.gguf"  // WordPiece: all-MiniLM-L6-v2's vocabulary
	xlmrTinyModel  = "models/xlmr-tiny.gguf"  // Unigram: XLM-R's vocabulary and charsmap
	minilmF32Model = "models/minilm-f32.gguf" // real weights
	minilmF16Model = "models/minilm-f16.gguf"
)

// encoderModel is modelFile for the encoder models, which make models also writes.
func encoderModel(t *testing.T, rel string) string {
	t.Helper()
	path := filepath.Join(testrepo.RootOf(t), rel)
	if _, err := os.Stat(path); err != nil {
		if testenv.RequireE2E() {
			t.Fatalf("%s is missing; generate it with `make models`", rel)
		}
		t.Skipf("%s is absent; generate it with `make models`", rel)
	}
	return path
}

type parityFile struct {
	Entries []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"entries"`
}

func readParity(t *testing.T, name string) parityFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testrepo.RootOf(t), "tokenizer", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var p parityFile
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// plain says whether text is lowercase ASCII letters, digits, single spaces and basic
// punctuation, under 100 bytes: text on which llama.cpp's tokenizers and HF's must
// agree, since none of their known differences applies (accents, compatibility
// characters, leading, trailing and repeated spaces, control characters,
// special-token literals, WordPiece's 100-character limit, which llama.cpp lacks).
func plain(text string) bool {
	if text == "" || len(text) >= 100 || text[len(text)-1] == ' ' || text[0] == ' ' {
		return false
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == ' ' && (i == 0 || text[i-1] != ' ') || c == ',' || c == '.' || c == '!' || c == '?' || c == '\'') {
			return false
		}
	}
	return true
}

// TestEncoderVocabularies loads the generated GGUFs with llama.cpp's own tokenizer (a
// free second reference) and compares it with package tokenizer, which holds HF's ids
// (tokenizer/testdata). On plain text both must agree on every text; on the hard
// strings llama.cpp is known to differ from HF (docs/tokenizers.md), and the numbers of
// agreeing texts are pinned, so a change on either side shows.
func TestEncoderVocabularies(t *testing.T) {
	for _, tc := range []struct {
		model, parity string
		agree         int // hard strings on which llama.cpp gives HF's ids
	}{
		{bertTinyModel, "parity-wordpiece.json", 321},
		{xlmrTinyModel, "parity-unigram.json", 385},
	} {
		t.Run(filepath.Base(tc.model), func(t *testing.T) {
			path := encoderModel(t, tc.model)
			tok, err := tokenizer.FromGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			p := readParity(t, tc.parity)
			texts := make([]string, len(p.Entries))
			for i, e := range p.Entries {
				texts[i] = e.Text
			}
			got, err := llamaTokenize(path, texts)
			if err != nil {
				t.Fatal(err)
			}
			agree, plains := 0, 0
			var differ []string
			for i, e := range p.Entries {
				if ours := tok.Encode(e.Text); !slices.Equal(ours, e.IDs) {
					t.Errorf("package tokenizer on the GGUF gives %v for %q, HF %v", ours, e.Text, e.IDs)
				}
				same := slices.Equal(got[i], e.IDs)
				if same {
					agree++
				} else if len(differ) < 8 {
					differ = append(differ, e.Text)
				}
				if plain(e.Text) {
					plains++
					if !same {
						t.Errorf("llama.cpp tokenizes the plain text %q as %v, HF as %v", e.Text, got[i], e.IDs)
					}
				}
			}
			t.Logf("llama.cpp's tokenizer agrees with HF on %d of %d hard strings (all %d plain ones); some that differ: %q", agree, len(p.Entries), plains, differ)
			if plains < 10 {
				t.Errorf("only %d plain texts; the comparison needs at least 10", plains)
			}
			if agree != tc.agree {
				t.Errorf("llama.cpp agrees with HF on %d hard strings, %d when this test was written: which side changed?", agree, tc.agree)
			}
		})
	}
}

// TestEncoderPooling runs the generated BERT GGUFs through llama.cpp with the model's
// own pooling (MEAN), as a first check that llama.cpp loads every tensor and key
// cmd/genmodel writes: vectors of the model's width, finite, and different for
// different texts.
func TestEncoderPooling(t *testing.T) {
	for _, rel := range []string{bertTinyModel, xlmrTinyModel} {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			path := encoderModel(t, rel)
			tok, err := tokenizer.FromGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			sp := tok.Special()
			var seqs [][]int32
			for _, text := range []string{"hello world", "a completely different sentence about cats", "中文 😀"} {
				ids := tok.Encode(text)
				if sp.AddBOS && sp.BOS >= 0 {
					ids = append([]int32{sp.BOS}, ids...)
				}
				if sep := max(sp.SEP, sp.EOS); sep >= 0 {
					ids = append(ids, sep)
				}
				seqs = append(seqs, ids)
			}
			vecs, err := llamaPooled(path, seqs, 1)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vecs {
				if len(v) != 64 {
					t.Fatalf("vector %d has %d values, want the tiny shape's 64", i, len(v))
				}
				for _, x := range v {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						t.Fatalf("vector %d holds %v", i, x)
					}
				}
			}
			if c := cosine32(vecs[0], vecs[1]); c > 0.9999 {
				t.Errorf("two different texts give vectors of cosine %.6f: the model ignores its input", c)
			}
		})
	}
}

type minilmReference struct {
	Queries []int     `json:"queries"`
	Texts   []string  `json:"texts"`
	IDs     [][]int32 `json:"ids"`
	Vectors []string  `json:"vectors"`
}

// TestMiniLMRealWeights holds llama.cpp's vectors of the real all-MiniLM-L6-v2,
// converted to GGUF by cmd/genmodel -convert, to an independent float64 forward pass
// of the original checkpoint (tools/hf-tokenizers/minilm_reference.py, 209 texts, among
// them non-English and emoji): cosine >= 0.9999 in F32 and >= 0.999 in F16 for every
// text, the same nearest neighbour for each retrieval query, and package tokenizer
// giving HF's ids for every text. Its negative controls (miniLMControls) show the
// bar missed by a wide margin when the pooling or the token ids are wrong.
func TestMiniLMRealWeights(t *testing.T) {
	ref, want := readMiniLMReference(t)
	for _, tc := range []struct {
		model string
		min   float64
	}{{minilmF32Model, 0.9999}, {minilmF16Model, 0.999}} {
		t.Run(filepath.Base(tc.model), func(t *testing.T) {
			path := encoderModel(t, tc.model)
			tok, err := tokenizer.FromGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			sp := tok.Special()
			for i, text := range ref.Texts {
				ids := append(append([]int32{sp.CLS}, tok.Encode(text)...), sp.SEP)
				if !slices.Equal(ids, ref.IDs[i]) {
					t.Errorf("text %d %q: package tokenizer gives %v, HF %v", i, text, ids, ref.IDs[i])
				}
			}
			// One thread: ggml's threads meet at spinning barriers, which on a loaded
			// 2-core host waste most of the time.
			got, err := llamaPooled(path, ref.IDs, 1)
			if err != nil {
				t.Fatal(err)
			}
			lowest, at := holdToReference(t, "llama.cpp", got, want, ref, tc.min)
			t.Logf("%s: %d texts, lowest cosine %.7f (text %d), %d retrieval queries agree", tc.model, len(got), lowest, at, len(ref.Queries))
		})
	}
	t.Run("negative controls", func(t *testing.T) { miniLMControls(t, ref, want) })
}

// miniLMControls shows that the bar of TestMiniLMRealWeights (cosine >= 0.9999 on
// every text, 1e-4 from 1) catches the mistakes a tokenizer or a pooling makes,
// and by how much: the F32 model's vectors computed wrongly on purpose must miss
// it on every text by the control's margin (no text's cosine above most). The
// controls are the class token's output instead of the mean (a pooling read
// wrongly from the GGUF) and every token id off by one (a vocabulary read with an
// entry missing at its start): at least 0.1 from 1 on every text, a thousand
// times the bar's allowance (measured: 0.702 and 0.636 at the highest, 0.529 and
// 0.084 median).
// [SEP] dropped, the bench's control, moves a mean over many tokens very little
// (0.99994 over its 128- to 512-token inputs), but these texts are short: it
// stays at least 1e-3 from 1 on each, ten times the allowance (measured: 0.99847
// at the highest, 0.99065 median).
func miniLMControls(t *testing.T, ref minilmReference, want [][]float32) {
	mean := openModel(t, minilmF32Model, Config{Threads: 1})
	cls := openModel(t, minilmF32Model, Config{Threads: 1, Pooling: gguf.PoolingCLS})
	vocab := int32(mean.Info().NVocab)
	noSEP := make([][]int32, len(ref.IDs))
	shifted := make([][]int32, len(ref.IDs))
	for i, ids := range ref.IDs {
		noSEP[i] = ids[:len(ids)-1]
		shifted[i] = slices.Clone(ids)
		for j := 1; j < len(ids)-1; j++ { // [CLS] and [SEP] stay
			shifted[i][j] = (ids[j] + 1) % vocab
		}
	}
	for _, c := range []struct {
		name string
		e    *Engine
		ids  [][]int32
		most float64
	}{
		{"CLS pooling instead of mean", cls, ref.IDs, 0.9},
		{"token ids off by one", mean, shifted, 0.9},
		{"[SEP] dropped", mean, noSEP, 0.999},
	} {
		got, err := c.e.Embed(context.Background(), c.ids)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cos := make([]float64, len(got))
		for i := range got {
			cos[i] = cosine32(got[i], want[i])
		}
		slices.Sort(cos)
		t.Logf("%s: cosine with the reference %.5f lowest, %.5f median, %.5f highest over %d texts", c.name, cos[0], cos[len(cos)/2], cos[len(cos)-1], len(cos))
		if highest := cos[len(cos)-1]; highest > c.most {
			t.Errorf("%s: a text reaches cosine %.5f with the reference, over %g: a bar of 0.9999 would catch this mistake by too little", c.name, highest, c.most)
		}
	}
}

// holdToReference checks vectors got (from who) against the reference's want:
// no cosine below least, and the same nearest text for each retrieval query.
// It returns the lowest cosine and its text.
func holdToReference(t *testing.T, who string, got, want [][]float32, ref minilmReference, least float64) (lowest float64, at int) {
	t.Helper()
	lowest = 1.0
	for i := range got {
		if c := cosine32(got[i], want[i]); c < lowest {
			lowest, at = c, i
		}
	}
	if lowest < least {
		t.Errorf("text %d %q: cosine %.7f with the reference, want >= %g", at, ref.Texts[at], lowest, least)
	}
	for _, q := range ref.Queries {
		if a, b := nearest(got, q), nearest(want, q); a != b {
			t.Errorf("query %q: %s's nearest text is %q, the reference's %q", ref.Texts[q], who, ref.Texts[a], ref.Texts[b])
		}
	}
	return lowest, at
}

func nearest(vecs [][]float32, q int) int {
	best, at := -2.0, -1
	for i := range vecs {
		if i != q {
			if c := cosine32(vecs[q], vecs[i]); c > best {
				best, at = c, i
			}
		}
	}
	return at
}

func cosine32(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

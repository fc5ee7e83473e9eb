package tokenizer

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// spmBPEVocabGGUF is the SentencePiece BPE test vocabulary (tools/hf-tokenizers/spm_bpe.py
// trains it with Gemma's options and writes it as llama.cpp's converter writes
// EmbeddingGemma's).
const spmBPEVocabGGUF = "testdata/spm-bpe-vocab.gguf"

func spmBPETokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	spmBPETok.once.Do(func() { spmBPETok.tok, spmBPETok.err = FromGGUF(filepath.FromSlash(spmBPEVocabGGUF)) })
	if spmBPETok.err != nil {
		t.Fatal(spmBPETok.err)
	}
	return spmBPETok.tok
}

// TestParitySPMBPE holds the SentencePiece BPE tokenizer to the Hugging Face
// tokenizer transformers' GemmaConverter makes of the same model
// (testdata/parity-spm-bpe.json).
func TestParitySPMBPE(t *testing.T) {
	checkParity(t, spmBPETokenizer(t), loadSPMParity(t, "parity-spm-bpe.json"))
}

// TestSPMBPESpecial reads the special tokens as EmbeddingGemma's GGUF declares them:
// <pad> 0, <eos> 1, <bos> 2, <unk> 3, both added.
func TestSPMBPESpecial(t *testing.T) {
	tok := spmBPETokenizer(t)
	if tok.Kind() != gguf.VocabSPM {
		t.Errorf("Kind() = %q, want %q", tok.Kind(), gguf.VocabSPM)
	}
	sp := tok.Special()
	if sp.PAD != 0 || sp.EOS != 1 || sp.BOS != 2 || sp.UNK != 3 || !sp.AddBOS || !sp.AddEOS || sp.AddSEP {
		t.Errorf("Special() = %+v, want PAD 0, EOS 1, BOS 2, UNK 3, AddBOS and AddEOS", sp)
	}
	// No piece holds a "▁" after other text, so texts are merged run by run and
	// EncodeLimit stops early: TestParitySPMBPE's EncodeLimit checks cover that path,
	// TestSPMBPEWholeText the other.
	if !tok.enc.(*spmBPE).splits {
		t.Error("the vocabulary is not split at runs of ▁; the parity test then covers only the whole-text path")
	}
}

// TestSPMBPEWholeText runs the parity texts through the path a vocabulary takes when
// a piece holds a "▁" after other text: each stretch between added tokens merged
// whole, as HF merges it. Cutting at runs of "▁" must not have been what made the
// ids right.
func TestSPMBPEWholeText(t *testing.T) {
	tok, err := FromGGUF(filepath.FromSlash(spmBPEVocabGGUF))
	if err != nil {
		t.Fatal(err)
	}
	tok.enc.(*spmBPE).splits = false
	checkParity(t, tok, loadSPMParity(t, "parity-spm-bpe.json"))
}

// TestSPMBPEDecode decodes byte-fallback tokens to their bytes, "▁" to spaces and
// user-defined pieces to their text, so that Decode(Encode(s)) is s for text without
// control-token literals or a literal "▁" (which decodes as a space, as HF's Replace
// decoder has it).
func TestSPMBPEDecode(t *testing.T) {
	tok := spmBPETokenizer(t)
	for _, s := range []string{"hello world", "  two  spaces", "ẞ 𝐀 😀 \u0000\x7f", "tab\tand\n\nnewlines", "<h1>title</h1>"} {
		ids := tok.Encode(s)
		got, err := tok.Decode(ids)
		if err != nil || got != s {
			t.Errorf("Decode(Encode(%q)) = %q, %v (ids %v)", s, got, err, ids)
		}
	}
	// A character the vocabulary lacks is its UTF-8 bytes as <0xNN> tokens.
	ids := tok.Encode("\U0010FFFD")
	want := make([]int32, 0, 4)
	for _, b := range []byte("\U0010FFFD") {
		id, ok := tok.TokenID(fmtByte(b))
		if !ok {
			t.Fatalf("no byte token for 0x%02X", b)
		}
		want = append(want, id)
	}
	if !slices.Equal(ids, want) {
		t.Errorf("Encode(U+10FFFD) = %v, want its byte tokens %v", ids, want)
	}
}

// llamaSPMVocabGGUF is Llama 2's SentencePiece BPE vocabulary as llama.cpp ships it
// (scripts/fetch-encoders.sh): a real vocabulary with a dummy prefix.
func llamaSPMVocabGGUF(t testing.TB) string {
	return filepath.Join(testrepo.RootOf(t), ".cache", "llama-spm", "ggml-vocab-llama-spm.gguf")
}

// TestParitySPMBPELlama holds the SentencePiece BPE tokenizer, with the "▁" prefix
// llama.cpp defaults to for this type, to what transformers' LlamaConverter makes of
// Llama 2's vocabulary (testdata/parity-spm-bpe-llama.json).
func TestParitySPMBPELlama(t *testing.T) {
	path := llamaSPMVocabGGUF(t)
	requireFile(t, path)
	tok, err := FromGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	if sp := tok.Special(); sp.BOS != 1 || sp.EOS != 2 || sp.UNK != 0 || !sp.AddBOS || sp.AddEOS {
		t.Errorf("Special() = %+v, want llama.cpp's BOS 1, EOS 2, UNK 0, AddBOS only", sp)
	}
	checkParity(t, tok, loadSPMParity(t, "parity-spm-bpe-llama.json"))
}

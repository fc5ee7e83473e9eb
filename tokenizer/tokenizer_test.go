package tokenizer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

// TestPretokenize checks the hand-written scanner piece by piece. The expected pieces
// are what HF's Rust tokenizers (Oniguruma running the Qwen2 regex) produced for each
// input; they cover every alternative of the regex and its backtracking corners.
func TestPretokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"hello world", []string{"hello", " world"}},
		{"Hello, world!", []string{"Hello", ",", " world", "!"}},
		{"a   b", []string{"a", "  ", " b"}},
		{"trailing  ", []string{"trailing", "  "}},
		{"  leading", []string{" ", " leading"}},
		{"x \t", []string{"x", " \t"}},
		{"x\t\ty", []string{"x", "\t", "\ty"}},
		{"a  \u0085b", []string{"a", "  ", "\u0085b"}},
		{"x\u3000\u3000y", []string{"x", "\u3000", "\u3000y"}},
		{"  \n x", []string{"  \n", " x"}},
		{"a \r\n b", []string{"a", " \r\n", " b"}},
		{"\r\n\r\n", []string{"\r\n\r\n"}},
		{"\n\n\nb", []string{"\n\n\n", "b"}},
		{"'Sx", []string{"'S", "x"}},
		{"'sx", []string{"'s", "x"}},
		{"'LLx", []string{"'LL", "x"}},
		{"'llama", []string{"'ll", "ama"}},
		{"I'M they'LL", []string{"I", "'M", " they", "'LL"}},
		{"we'VE you'RE it'S he'D I'm", []string{"we", "'VE", " you", "'RE", " it", "'S", " he", "'D", " I", "'m"}},
		{"'ſx", []string{"'ſ", "x"}},
		{"'ﬆx", []string{"'ﬆx"}},
		{"''s", []string{"''", "s"}},
		{"x.'s", []string{"x", ".'", "s"}},
		{"don't", []string{"don", "'t"}},
		{"'t'", []string{"'t", "'"}},
		{"1234", []string{"1", "2", "3", "4"}},
		{"3.14", []string{"3", ".", "1", "4"}},
		{"$100", []string{"$", "1", "0", "0"}},
		{" (\n", []string{" (\n"}},
		{"x?!\n\n", []string{"x", "?!\n\n"}},
		{"  !!  ", []string{" ", " !!", "  "}},
		{"a\u00a0b", []string{"a", "\u00a0b"}},
		{"(hello", []string{"(hello"}},
		{"\"quoted\"", []string{"\"quoted", "\""}},
		{"中文字符", []string{"中文字符"}},
		{"日本語のテキスト", []string{"日本語のテキスト"}},
		{"한국어 텍스트", []string{"한국어", " 텍스트"}},
		{"مرحبا بالعالم", []string{"مرحبا", " بالعالم"}},
		{"नमस\u094dत\u0947", []string{"नमस", "\u094dत", "\u0947"}},
		{"สว\u0e31สด\u0e35คร\u0e31บ", []string{"สว", "\u0e31สด", "\u0e35คร", "\u0e31บ"}},
		{"café", []string{"café"}},
		{"😀👍🏽", []string{"😀👍🏽"}},
		{"a\u0301", []string{"a", "\u0301"}},
		{"e \u0301x", []string{"e", " \u0301", "x"}},
		{"foo_bar", []string{"foo", "_bar"}},
		{"x=1;", []string{"x", "=", "1", ";"}},
		{"\tfunc main() {\n\t\treturn\n\t}", []string{"\tfunc", " main", "()", " {\n", "\t", "\treturn", "\n", "\t", "}"}},
		{"\u2028x", []string{"\u2028x"}},
		{"x\u2028", []string{"x", "\u2028"}},
		{"\u000b\u000cx", []string{"\u000b", "\u000cx"}},
		{"Ⅻ½²", []string{"Ⅻ", "½", "²"}},
		{"１２", []string{"１", "２"}},
	}
	for _, tt := range tests {
		if got := pieces(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("pieces(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// TestEncodeKnown pins ids checked against HF for the cases the brief and the package
// documentation single out.
func TestEncodeKnown(t *testing.T) {
	tok := qwenTokenizer(t)
	tests := []struct {
		name string
		in   string
		want []int32
	}{
		{"plain", "hello world", []int32{14990, 1879}},
		{"decomposed accents are composed (NFC)", "cafe\u0301 nai\u0308ve", []int32{924, 58858, 94880, 586}},
		{"precomposed gives the same", "caf\u00e9 na\u00efve", []int32{924, 58858, 94880, 586}},
		{"upper-case contractions", "I'M they'LL", []int32{40, 27603, 807, 6, 4086}},
		{"user-defined tokens are single ids", "<think>x</think>", []int32{151667, 87, 151668}},
		{"fim tokens are user-defined in Qwen3", "<|fim_prefix|>", []int32{151659}},
		{"a control-token literal stays text", "<|endoftext|>hi", []int32{27, 91, 8691, 723, 427, 91, 29, 6023}},
		{"newline runs", "abc\r\n\r\n  def", []int32{13683, 871, 220, 707}},
		{"long s folds to s in contractions", "'\u017f", []int32{6, 144815}},
		{"NEL is whitespace, and a prefix for letters", "a\u0085b", []int32{64, 126, 227, 65}},
		{"empty", "", []int32{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tok.Encode(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestVocabularyFacts(t *testing.T) {
	tok := qwenTokenizer(t)
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize() = %d, want 151669", got)
	}
	for piece, want := range map[string]int32{
		"<|endoftext|>": 151643,
		"<|im_start|>":  151644,
		"<|im_end|>":    151645,
		"<think>":       151667,
		"\u0120the":     279, // " the" in byte-level form
		"!":             0,
	} {
		if got, ok := tok.TokenID(piece); !ok || got != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d, true", piece, got, ok, want)
		}
	}
	if id, ok := tok.TokenID(" the"); ok {
		t.Errorf("TokenID(%q) = %d; raw text is not a stored token form", " the", id)
	}
}

// TestControlTokensNeverFromText: whatever the text, Encode never yields a control id,
// so a client cannot end a sequence early or forge chat markup.
func TestControlTokensNeverFromText(t *testing.T) {
	tok := qwenTokenizer(t)
	var controls []string
	for id, typ := range tok.types {
		if typ == TokenControl {
			controls = append(controls, tok.tokens.at(int32(id)))
		}
	}
	if len(controls) != 14 {
		t.Fatalf("found %d control tokens, want Qwen3's 14", len(controls))
	}
	text := strings.Join(controls, " x ") + "<think>" + strings.Join(controls, "")
	for _, id := range tok.Encode(text) {
		if tok.types[id] == TokenControl {
			t.Fatalf("Encode produced control token %d %q", id, tok.tokens.at(int32(id)))
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		// Unicode's own example of maximal-subpart substitution (Table 3-8).
		{"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"},
		{"\xE2\x82", "\uFFFD"},
		{"\xE2\x82(", "\uFFFD("},
		{"\xF0\x9F\x98", "\uFFFD"},
		{"\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD"}, // an encoded surrogate
		{"\xC0\xAF", "\uFFFD\uFFFD"},
		{"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xE0\x80\xAF", "\uFFFD\uFFFD\uFFFD"},
		{"\xFF\xFE", "\uFFFD\uFFFD"},
		{"valid \u00e9", "valid \u00e9"},
	}
	tok := qwenTokenizer(t)
	for _, tt := range tests {
		if got := toValidUTF8(tt.in); got != tt.want {
			t.Errorf("toValidUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got, want := tok.Encode(tt.in), tok.Encode(tt.want); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want Encode(%q) = %v", tt.in, got, tt.want, want)
		}
	}
}

func TestDecode(t *testing.T) {
	tok := qwenTokenizer(t)
	tests := []struct {
		name    string
		ids     []int32
		want    string
		wantErr string
	}{
		{"text", []int32{14990, 1879}, "hello world", ""},
		{"control tokens as their text", []int32{151644, 872, 198, 151645}, "<|im_start|>user\n<|im_end|>", ""},
		{"user-defined tokens as their text", []int32{151667, 87, 151668}, "<think>x</think>", ""},
		{"empty", nil, "", ""},
		// "\u00e9" is bytes C3 A9; byte tokens 127 and 102 hold those bytes alone.
		{"a character cut in half becomes U+FFFD", []int32{14990, 127}, "hello\uFFFD", ""},
		{"its two halves make the character", []int32{127, 102}, "\u00e9", ""},
		{"negative id", []int32{14990, -1}, "", "token 1 is id -1, outside the vocabulary"},
		{"id past the end", []int32{151669}, "", "token 0 is id 151669, outside the vocabulary (0 to 151668)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tok.Decode(tt.ids)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode(%v) error = %v, want it to contain %q", tt.ids, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Decode(%v) = %q, %v; want %q", tt.ids, got, err, tt.want)
			}
		})
	}
}

// TestBPEMergeOrder checks the merge loop on a hand-made vocabulary where the order
// of merges decides the result.
func TestBPEMergeOrder(t *testing.T) {
	tests := []struct {
		name   string
		merges []string
		word   string
		want   []string
	}{
		{"overlapping equal pairs merge leftmost first", []string{"a a"}, "aaa", []string{"aa", "a"}},
		{"four in a row make two pairs", []string{"a a", "aa aa"}, "aaaa", []string{"aaaa"}},
		{"lower rank wins over position", []string{"b c", "a b"}, "abc", []string{"a", "bc"}},
		{"rank order, not list of pairs seen", []string{"a b", "b c"}, "abc", []string{"ab", "c"}},
		{"merges chain through new pairs", []string{"b c", "a bc", "abc d"}, "abcd", []string{"abcd"}},
		{"a merge only applies to adjacent symbols", []string{"a c"}, "abc", []string{"a", "b", "c"}},
		{"no merges: bytes", nil, "xyz", []string{"x", "y", "z"}},
		{"multi-byte characters start as bytes", []string{"\u00c3 \u00a9"}, "\u00e9", []string{"\u00c3\u00a9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := New(tinyVocab(tt.merges, nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, id := range tok.bpe.appendWord(nil, tt.word) {
				got = append(got, tok.tokens.at(int32(id)))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("BPE(%q) = %q, want %q", tt.word, got, tt.want)
			}
		})
	}
}

// TestAddedTokenMatching checks HF's leftmost-longest search and its treatment of
// control tokens on a hand-made vocabulary.
func TestAddedTokenMatching(t *testing.T) {
	v := tinyVocab(nil, []string{"<c>", "ab"}, []string{"<u>", "<uu>", "bc", "[x]"})
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) int32 {
		i, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	bytes := func(s string) []int32 {
		var out []int32
		for i := 0; i < len(s); i++ {
			out = append(out, tok.bpe.byteIDs[s[i]])
		}
		return out
	}
	tests := []struct {
		name string
		in   string
		want []int32
	}{
		{"longest at a position", "<uu>", []int32{id("<uu>")}},
		{"shorter one when the longer does not match", "<u>u>", append([]int32{id("<u>")}, bytes("u>")...)},
		{"several, with text between", "x<u>[x]y", slices.Concat(bytes("x"), []int32{id("<u>"), id("[x]")}, bytes("y"))},
		{"a control token stays text", "<c>", bytes("<c>")},
		// HF finds "ab" (control, leftmost) first, leaves it in the text and resumes
		// after it, so the user-defined "bc" overlapping it is never seen.
		{"a control match hides an overlapping user-defined one", "abc", bytes("abc")},
		{"the user-defined token after a control one", "abbc", slices.Concat(bytes("ab"), []int32{id("bc")})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tok.Encode(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestNFCBetweenAddedTokens(t *testing.T) {
	tok := qwenTokenizer(t)
	// NFC applies to the text between added tokens, each stretch on its own, as in HF.
	got := tok.Encode("cafe\u0301<think>nai\u0308ve")
	want := slices.Concat(tok.Encode("caf\u00e9"), []int32{151667}, tok.Encode("na\u00efve"))
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestNewRejects(t *testing.T) {
	good := tinyVocab([]string{"a b"}, []string{"<c>"}, []string{"<u>"})
	tests := []struct {
		name    string
		edit    func(v *Vocab)
		wantErr string
	}{
		{"no tokens", func(v *Vocab) { *v = Vocab{} }, "no tokens"},
		{"types missing", func(v *Vocab) { v.Types = v.Types[:10] }, "but 10 token types"},
		{"duplicate token", func(v *Vocab) { v.Tokens[256] = v.Tokens[5] }, "duplicates token 5"},
		{"not byte-level", func(v *Vocab) { v.Tokens[256] = "\u2581hello" }, "not in byte-level form"},
		{"unknown type", func(v *Vocab) { v.Types[3] = 2 }, "has type 2"},
		{"empty added token", func(v *Vocab) { v.Tokens[len(v.Tokens)-1] = "" }, "is empty"},
		{"byte token missing", func(v *Vocab) { v.Types[65] = TokenUnused }, "no normal token \"A\" for byte 0x41"},
		{"merge without space", func(v *Vocab) { v.Merges = []string{"ab"} }, "not two tokens separated by one space"},
		{"merge with two spaces", func(v *Vocab) { v.Merges = []string{"a b c"} }, "not two tokens separated by one space"},
		{"merge part unknown", func(v *Vocab) { v.Merges = []string{"a zz"} }, "\"zz\" is not in the vocabulary"},
		{"merge result unknown", func(v *Vocab) { v.Merges = []string{"b a"} }, "\"ba\" is not in the vocabulary"},
		{"merge of an added token", func(v *Vocab) { v.Merges = []string{"<c> a"} }, "not a normal token"},
		{"repeated merge", func(v *Vocab) { v.Merges = []string{"a b", "a b"} }, "merge 1 \"a b\" repeats merge 0"},
	}
	if _, err := New(good); err != nil {
		t.Fatalf("New(good vocabulary): %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Vocab{Tokens: slices.Clone(good.Tokens), Types: slices.Clone(good.Types), Merges: slices.Clone(good.Merges)}
			tt.edit(&v)
			_, err := New(v)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New: error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeUnusedToken(t *testing.T) {
	v := tinyVocab(nil, nil, nil)
	v.Tokens = append(v.Tokens, "[PAD256]")
	v.Types = append(v.Types, TokenUnused)
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Decode([]int32{65, 256}); err == nil || !strings.Contains(err.Error(), "token 1 is id 256, an unused (padding) token") {
		t.Fatalf("Decode of a padding id: error %v", err)
	}
	if got := tok.Encode("[PAD256]"); len(got) != 8 {
		t.Fatalf("Encode(%q) = %v; an unused token must never be produced", "[PAD256]", got)
	}
}

// TestConcurrentEncode runs the parity texts from many goroutines at once (with -race
// this also checks the word cache's locking).
func TestConcurrentEncode(t *testing.T) {
	tok := qwenTokenizer(t)
	entries := loadParity(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(entries); i += 3 {
				if got := tok.Encode(entries[i].Text); !slices.Equal(got, entries[i].IDs) {
					errs <- fmt.Errorf("goroutine %d, entry %d: ids differ from the parity file", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestWordCacheBounded(t *testing.T) {
	c := newWordCache(cacheShards * 4)
	for i := 0; i < 10000; i++ {
		c.put(fmt.Sprintf("w%d", i), []int32{int32(i)})
	}
	total := 0
	for i := range c.shards {
		total += len(c.shards[i].m)
	}
	if total > cacheShards*4 {
		t.Fatalf("cache holds %d words, capacity %d", total, cacheShards*4)
	}
	c.put("last", []int32{7})
	if ids, ok := c.get("last"); !ok || !slices.Equal(ids, []int32{7}) {
		t.Fatalf("get(last) = %v, %v", ids, ok)
	}
}

// TestFromGGUF writes the real vocabulary into a GGUF the way llama.cpp's converter
// does (including its control typing of <|fim_prefix|> and friends) and checks that the
// tokenizer read back encodes the parity texts exactly.
func TestFromGGUF(t *testing.T) {
	want := qwenTokenizer(t)
	v, err := vocabFromTokenizerJSON(tokenizerJSONPath(t))
	if err != nil {
		t.Fatal(err)
	}
	converted := 0
	for i, tok := range v.Tokens {
		if v.Types[i] == TokenUserDefined && strings.HasPrefix(tok, "<|") && strings.HasSuffix(tok, "|>") {
			v.Types[i] = TokenControl // what convert_hf_to_gguf.py's does_token_look_special does
			converted++
		}
	}
	if converted != len(qwenUserDefined) {
		t.Fatalf("typed %d tokens control as llama.cpp would, want %d", converted, len(qwenUserDefined))
	}
	write := func(t *testing.T, v Vocab, model, pre string) string {
		w := gguf.NewWriter()
		w.AddKV("general.architecture", "qwen3")
		w.AddKV(keyModel, model)
		if pre != "" {
			w.AddKV(keyPre, pre)
		}
		w.AddKV(keyTokens, v.Tokens)
		w.AddKV(keyTypes, v.Types)
		w.AddKV(keyMerges, v.Merges)
		path := filepath.Join(t.TempDir(), "vocab.gguf")
		if err := w.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		return path
	}

	tok, err := FromGGUF(write(t, v, "gpt2", "qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != want.VocabSize() {
		t.Fatalf("VocabSize() = %d, want %d", tok.VocabSize(), want.VocabSize())
	}
	for i, e := range loadParity(t) {
		if got := tok.Encode(e.Text); !slices.Equal(got, e.IDs) {
			t.Fatalf("entry %d: Encode(%s) from the GGUF differs from HF", i, abbrev(e.Text))
		}
	}

	tiny := tinyVocab([]string{"a b"}, nil, nil)
	for _, tt := range []struct {
		name, model, pre, wantErr string
	}{
		{"not implemented", "rwkv", "", `tokenizer.ggml.model is "rwkv"; implemented are`},
		{"sentencepiece bpe without scores", "llama", "default", "tokenizer.ggml.scores is missing"},
		{"other pre-tokenizer", "gpt2", "llama-bpe", `tokenizer.ggml.pre is "llama-bpe"`},
		{"pre-tokenizer missing", "gpt2", "", "tokenizer.ggml.pre"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromGGUF(write(t, tiny, tt.model, tt.pre))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("FromGGUF: error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	t.Run("invalid vocabulary names the file", func(t *testing.T) {
		bad := tinyVocab([]string{"a zz"}, nil, nil)
		path := write(t, bad, "gpt2", "qwen2")
		_, err := FromGGUF(path)
		if err == nil || !strings.Contains(err.Error(), `"zz" is not in the vocabulary`) || !strings.Contains(err.Error(), path) {
			t.Fatalf("FromGGUF: error %v, want the merge problem and the path", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := FromGGUF(filepath.Join(t.TempDir(), "none.gguf"))
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("FromGGUF(missing): error %v, want one wrapping fs.ErrNotExist", err)
		}
	})
}

// TestFootprint holds the memory a Qwen3 tokenizer keeps: serve keeps one for its
// whole life, and the garbage collector's heap goal doubles it. As []string and Go
// maps it was 20.1 MB; the flat tables of tables.go take 8.1 MB.
func TestFootprint(t *testing.T) {
	path := tokenizerJSONPath(t)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is missing; run scripts/fetch-tokenizer.sh", path)
	}
	v, err := vocabFromTokenizerJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := live()
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	kept := float64(int64(live())-int64(before)) / 1e6
	runtime.KeepAlive(v) // live in both measurements: only what New added counts
	runtime.KeepAlive(tok)
	t.Logf("a Qwen3 tokenizer (%d tokens) keeps %.1f MB", tok.VocabSize(), kept)
	if kept > 10 {
		t.Errorf("the tokenizer keeps %.1f MB, want at most 10", kept)
	}
}

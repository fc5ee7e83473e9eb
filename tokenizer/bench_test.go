package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// benchTexts returns the benchmark inputs from testdata/corpus: English prose (the whole
// of Opticks, 567 KB) and mixed text (the multilingual sentences, emoji and code
// samples, repeated to about 256 KB).
func benchTexts(b *testing.B) map[string]string {
	b.Helper()
	dir := filepath.Join(testrepo.RootOf(b), "testdata", "corpus")
	read := func(name string) string {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		return string(raw)
	}
	mixed := read("multilingual.txt") + read("code/sample.go.txt") + read("code/sample.py.txt") + read("code/sample.json.txt")
	return map[string]string{
		"english": read("opticks.txt"),
		"mixed":   strings.Repeat(mixed, 256<<10/len(mixed)+1),
	}
}

// BenchmarkEncode reports single-core throughput in MB/s of input. "cached" is the
// server's steady state (the word cache holds the text's vocabulary after the first
// iteration); "nocache" merges every word every time.
func BenchmarkEncode(b *testing.B) {
	tok := qwenTokenizer(b)
	noCache := *tok
	noCache.cache = nil
	texts := benchTexts(b)
	for _, name := range []string{"english", "mixed"} {
		text := texts[name]
		for _, variant := range []struct {
			name string
			tok  *Tokenizer
		}{{"cached", tok}, {"nocache", &noCache}} {
			b.Run(name+"/"+variant.name, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				var n int
				for b.Loop() {
					n = len(variant.tok.Encode(text))
				}
				b.ReportMetric(float64(len(text))/float64(n), "bytes/token")
			})
		}
	}
}

// BenchmarkEncodeParallel shows how the cache's sharded locks hold up when the server
// tokenizes many requests at once.
func BenchmarkEncodeParallel(b *testing.B) {
	tok := qwenTokenizer(b)
	text := benchTexts(b)["mixed"][:16<<10]
	b.SetBytes(int64(len(text)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok.Encode(text)
		}
	})
}

// BenchmarkPretokenize isolates the hand-written scanner.
func BenchmarkPretokenize(b *testing.B) {
	texts := benchTexts(b)
	for _, name := range []string{"english", "mixed"} {
		text := texts[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				for i := 0; i < len(text); {
					i = nextPiece(text, i)
				}
			}
		})
	}
}

// BenchmarkEncodeEncoders is BenchmarkEncode for the WordPiece (all-MiniLM-L6-v2) and
// Unigram (XLM-R) tokenizers, which have no word cache, and the SentencePiece BPE one
// (the Gemma-like test vocabulary), which has.
func BenchmarkEncodeEncoders(b *testing.B) {
	texts := benchTexts(b)
	for _, tc := range []struct {
		name string
		tok  *Tokenizer
	}{{"wordpiece", minilmTokenizer(b)}, {"unigram", xlmrTokenizer(b)}, {"spm-bpe", spmBPETokenizer(b)}} {
		for _, name := range []string{"english", "mixed"} {
			text := texts[name]
			b.Run(tc.name+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				n := 0
				for b.Loop() {
					n = len(tc.tok.Encode(text))
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

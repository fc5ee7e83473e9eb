// Command genmodel writes a Qwen3-architecture GGUF with random weights and the real
// Qwen3 vocabulary: a test model that llama.cpp loads like the official
// Qwen3-Embedding GGUFs, without downloading gigabytes of real weights.
//
//	go run ./cmd/genmodel -tokenizer .cache/qwen3/tokenizer.json -shape tiny -out models/tiny.gguf
//
// With -arch bert it writes a BERT encoder (llama.cpp's "bert" architecture, mean
// pooling) the same way, carrying a real WordPiece vocabulary (-tokenizer, a BERT
// tokenizer.json) or a real Unigram one (-vocab-gguf, e.g. XLM-R's); with -convert it
// converts a real sentence-transformers BertModel checkpoint (all-MiniLM-L6-v2) to
// GGUF in F32 or F16, as llama.cpp's convert_hf_to_gguf.py does (docs/tokenizers.md):
//
//	go run ./cmd/genmodel -arch bert -tokenizer .cache/minilm/tokenizer.json -out models/bert-tiny.gguf
//	go run ./cmd/genmodel -convert .cache/minilm -type f32 -out models/minilm-f32.gguf
//
// The same flags and seed always give a byte-identical file. The weights are random, so
// the vectors mean nothing; what the model is good for is checking that an engine
// computes the Qwen3 graph exactly (see internal/reference) and measuring speed and
// memory at the real shape (-shape 0.6b). It knows nothing about serving or tokenizing.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/gguf"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "genmodel:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("genmodel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tokenizer = fs.String("tokenizer", ".cache/qwen3/tokenizer.json", "Hugging Face tokenizer.json supplying the vocabulary (scripts/fetch-tokenizer.sh fetches Qwen3's)")
		shapeName = fs.String("shape", "tiny", "model shape: "+strings.Join(shapeNames(), " or "))
		typeName  = fs.String("type", "f16", "type of the 2-D weight matrices: f16, f32, bf16 or q8_0 (norm weights are always f32)")
		seed      = fs.Uint64("seed", 1, "random seed; the same seed gives a byte-identical file")
		out       = fs.String("out", "", "output GGUF path (required); parent directories are created")
		name      = fs.String("name", "", "general.name (default \"qwen3-<shape>-random-seed<seed>\", or qwen3-reranker-... with -task rerank)")
		task      = fs.String("task", "embed", "embed (a Qwen3-Embedding-like model) or rerank (a Qwen3-Reranker laid out as llama.cpp converts it: pooling type rank and a two-row cls.output.weight head; with -arch bert or neo-bert a cross-encoder as llama.cpp converts BertForSequenceClassification or NeoBERTForSequenceClassification: pooling type rank, the pooler (dense layer) as cls.weight and cls.bias, a one-output cls.output.weight and cls.output.bias; with -arch jina-bert-v2 one as llama.cpp loads jina-reranker-v1: pooling type rank, the one-output classifier as cls.weight and cls.bias)")
		hfDir     = fs.String("hf", "", "also write the same weights as a Hugging Face snapshot (config.json, model.safetensors) into this `folder`; f16 and f32 only")
		arch      = fs.String("arch", "qwen3", "architecture: qwen3, or an encoder ("+strings.Join(encoderArchs, ", ")+"; -shape tiny, minilm or large, the vocabulary from -tokenizer or -vocab-gguf, mean pooling but neo-bert's CLS)")
		vocabGGUF = fs.String("vocab-gguf", "", "with an encoder -arch: copy the tokenizer metadata of this GGUF instead of reading -tokenizer (e.g. .cache/xlmr/ggml-vocab-nomic-bert-moe.gguf, XLM-R's Unigram vocabulary)")
		convert   = fs.String("convert", "", "convert the real sentence-transformers BertModel checkpoint in this `folder` (config.json, model.safetensors, tokenizer.json, 1_Pooling/config.json) instead of drawing random weights; -type f32 or f16")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: genmodel -out PATH [-arch qwen3|bert] [-shape tiny|0.6b|minilm|large] [-type f16|f32|bf16|q8_0] [-task embed|rerank] [-seed N] [-tokenizer PATH] [-vocab-gguf PATH] [-convert DIR] [-name NAME] [-hf DIR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q; all options are flags", fs.Args())
	}
	if *out == "" {
		return errors.New("-out is required (for example -out models/tiny.gguf)")
	}
	if *convert != "" || slices.Contains(encoderArchs, *arch) {
		tokenizerSet := false
		fs.Visit(func(f *flag.Flag) { tokenizerSet = tokenizerSet || f.Name == "tokenizer" })
		tok := ""
		if tokenizerSet {
			tok = *tokenizer
		}
		return runBert(bertRun{arch: *arch, out: *out, shape: *shapeName, typ: *typeName, seed: *seed, name: *name,
			tokenizer: tok, vocabGGUF: *vocabGGUF, convert: *convert, hf: *hfDir, task: *task}, stdout)
	}
	if *arch != "qwen3" {
		return fmt.Errorf("-arch %q is unknown; use qwen3 or an encoder: %s", *arch, strings.Join(encoderArchs, ", "))
	}
	if *vocabGGUF != "" {
		return errors.New("-vocab-gguf is for an encoder -arch")
	}
	s, ok := shapes[*shapeName]
	if !ok {
		return fmt.Errorf("-shape %q is unknown; use %s", *shapeName, strings.Join(shapeNames(), " or "))
	}
	typ, err := gguf.ParseType(*typeName)
	if _, supported := fileType[typ]; err != nil || !supported {
		return fmt.Errorf("-type %q is not supported; use f16, f32, bf16 or q8_0", *typeName)
	}
	if *task != "embed" && *task != "rerank" {
		return fmt.Errorf("-task %q is unknown; use embed or rerank", *task)
	}
	rerank := *task == "rerank"
	if *name == "" {
		kind := ""
		if rerank {
			kind = "reranker-"
		}
		*name = fmt.Sprintf("qwen3-%s%s-random-seed%d", kind, s.name, *seed)
	}

	start := time.Now()
	v, err := loadVocab(*tokenizer)
	if err != nil {
		return err
	}
	o := options{shape: s, typ: typ, seed: *seed, name: *name, vocab: v, rerank: rerank}
	var tensors []tensorSpec
	if *hfDir != "" {
		if typ != gguf.TypeF16 && typ != gguf.TypeF32 {
			return fmt.Errorf("-hf needs -type f16 or f32; safetensors have no %s", typ)
		}
		o.record = &tensors
	}
	sum, err := generate(*out, o)
	if err != nil {
		return err
	}
	if *hfDir != "" {
		if err := writeHF(*hfDir, s, len(v.tokens), tensors); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s: config.json, model.safetensors\n", *hfDir)
	}
	fmt.Fprintf(stdout, "wrote %s: %d bytes (%.1f MiB), %d parameters in %d tensors, shape %s, %s matrices, seed %d, %.1fs\n",
		*out, sum.bytes, float64(sum.bytes)/(1<<20), sum.parameters, sum.tensors, s.name, typ, *seed, time.Since(start).Seconds())
	return nil
}

// generate writes the model to path, creating parent directories.
func generate(path string, o options) (summary, error) {
	return writeModel(path, func(w *gguf.Writer) (uint64, int, error) { return build(w, o) })
}

// writeModel writes the model build adds to path, creating parent directories.
func writeModel(path string, build func(*gguf.Writer) (uint64, int, error)) (summary, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return summary{}, err
	}
	w := gguf.NewWriter()
	params, tensors, err := build(w)
	if err != nil {
		return summary{}, err
	}
	if err := w.WriteFile(path); err != nil {
		return summary{}, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return summary{}, err
	}
	return summary{bytes: st.Size(), parameters: params, tensors: tensors}, nil
}

func shapeNames() []string {
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// bertRun is the command line of a BERT model.
type bertRun struct {
	arch, out, shape, typ, name, tokenizer, vocabGGUF, convert, hf, task string
	seed                                                                 uint64
}

func runBert(r bertRun, stdout io.Writer) error {
	switch {
	case r.hf != "":
		return errors.New("-hf is for -arch qwen3")
	case r.task == "rerank" && (crossEncoderHead(r.arch, bertShape{}) == nil || r.convert != ""):
		return errors.New("-task rerank is for -arch qwen3, or -arch bert, neo-bert or jina-bert-v2 with random weights (a cross-encoder)")
	case r.task != "embed" && r.task != "rerank":
		return fmt.Errorf("-task %q is unknown; use embed or rerank", r.task)
	}
	typ, err := gguf.ParseType(r.typ)
	if err != nil || (typ != gguf.TypeF32 && typ != gguf.TypeF16) {
		return fmt.Errorf("-type %q is not supported for bert; use f32 or f16", r.typ)
	}
	start := time.Now()
	o := bertOptions{arch: r.arch, typ: typ, seed: r.seed, name: r.name, rerank: r.task == "rerank"}
	if r.convert != "" {
		o.arch = "bert"
	}
	what := "random weights"
	if r.convert != "" {
		if r.tokenizer != "" || r.vocabGGUF != "" {
			return errors.New("-convert reads the checkpoint's own tokenizer.json; drop -tokenizer and -vocab-gguf")
		}
		if o.shape, o.vocab, o.weights, err = bertCheckpoint(r.convert); err != nil {
			return err
		}
		if o.name == "" {
			o.name = o.shape.name
		}
		what = "converted from " + r.convert
	} else {
		s, ok := bertShapes[r.shape]
		if !ok {
			return fmt.Errorf("-shape %q is unknown for bert; use tiny, minilm or large", r.shape)
		}
		if r.arch == "neo-bert" {
			s.pooling = poolingCLS // NeoBERT's
		}
		if r.arch == "gemma-embedding" {
			// llama.cpp makes every sixth layer of gemma-embedding global and the
			// others sliding-window (set_swa_pattern(6)); with fewer than 6 layers the
			// global attention mask is in no layer's graph, gets no buffer, and
			// encoding aborts in its set_input (GGML_ASSERT(buffer)).
			s.layers = max(s.layers, gemmaSWAPattern)
		}
		if o.rerank {
			s.pooling = poolingRank
			if r.vocabGGUF != "" {
				// An XLM-R cross-encoder (bge-reranker): RoBERTa has one token type.
				s.tokenTypes = 1
			}
		}
		o.shape = s
		switch {
		case r.vocabGGUF != "" && r.tokenizer != "":
			return errors.New("give -tokenizer or -vocab-gguf, not both")
		case r.vocabGGUF != "":
			o.vocab, err = ggufVocab(r.vocabGGUF)
		default:
			if r.tokenizer == "" {
				r.tokenizer = ".cache/minilm/tokenizer.json"
			}
			o.vocab, err = wordPieceVocab(r.tokenizer)
		}
		if err != nil {
			return err
		}
		if o.name == "" {
			kind := ""
			if o.rerank {
				kind = "reranker-"
			}
			o.name = fmt.Sprintf("%s-%s%s-random-seed%d", r.arch, kind, s.name, r.seed)
		}
	}
	sum, err := writeModel(r.out, func(w *gguf.Writer) (uint64, int, error) { return buildBert(w, o) })
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d bytes (%.1f MiB), %d parameters in %d tensors, %s %s, %s matrices, %s, %.1fs\n",
		r.out, sum.bytes, float64(sum.bytes)/(1<<20), sum.parameters, sum.tensors, o.arch, o.shape.name, typ, what, time.Since(start).Seconds())
	return nil
}

// Command genmodel writes a Qwen3-architecture GGUF with random weights and the real
// Qwen3 vocabulary: a test model that llama.cpp loads like the official
// Qwen3-Embedding GGUFs, without downloading gigabytes of real weights.
//
//	go run ./cmd/genmodel -tokenizer .cache/qwen3/tokenizer.json -shape tiny -out models/tiny.gguf
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
		task      = fs.String("task", "embed", "embed (a Qwen3-Embedding-like model) or rerank (a Qwen3-Reranker laid out as llama.cpp converts it: pooling type rank and a two-row cls.output.weight head)")
		hfDir     = fs.String("hf", "", "also write the same weights as a Hugging Face snapshot (config.json, model.safetensors) into this `folder`; f16 and f32 only")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: genmodel -out PATH [-shape tiny|0.6b] [-type f16|f32|bf16|q8_0] [-task embed|rerank] [-seed N] [-tokenizer PATH] [-name NAME] [-hf DIR]")
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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return summary{}, err
	}
	w := gguf.NewWriter()
	params, tensors, err := build(w, o)
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

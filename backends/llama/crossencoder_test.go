package llama

import (
	"context"
	"encoding/json"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// The random-weight cross-encoders `make models` writes (cmd/genmodel -arch bert
// -task rerank): pooling type rank, the pooler and a one-output classifier; the
// BERT one with MiniLM's vocabulary and two token types (an ms-marco MiniLM), the
// XLM-R one with XLM-R's Unigram vocabulary and one token type (a bge-reranker).
const (
	bertRerankerModel = "models/bert-reranker-tiny.gguf"
	xlmrRerankerModel = "models/xlmr-reranker-tiny.gguf"
)

// crossEncoderReference is testdata/crossencoder-reference.json
// (tools/hf-tokenizers/crossencoder_reference.py): pairs tokenized by HF's tokenizer
// as pairs, with HF's token type ids, and the logit of an independent float64
// BertForSequenceClassification forward pass over the GGUF's weights.
type crossEncoderReference struct {
	Pairs []struct {
		Query    string  `json:"query"`
		Document string  `json:"document"`
		IDs      []int32 `json:"ids"`
		Types    []int   `json:"types"`
		Logit    float64 `json:"logit"`
	} `json:"pairs"`
}

func readCrossEncoderReference(t *testing.T, name string) crossEncoderReference {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testrepo.RootOf(t), "backends", "llama", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ref crossEncoderReference
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Pairs) < 20 {
		t.Fatalf("the reference holds %d pairs; want at least 20", len(ref.Pairs))
	}
	return ref
}

// crossEncoderLogitTolerance bounds the engine's logit against the float64
// reference: the tiny model's F16 matrices are multiplied by llama.cpp in f32 (and
// flash attention casts K and V to f16 for the packed sequences). Measured: see
// TestCrossEncoderAgainstReference's log.
const crossEncoderLogitTolerance = 0.01

// TestCrossEncoderAgainstReference scores every reference pair of each
// cross-encoder with the engine, all in one Embed call (packed) and each alone, and
// holds each logit to the reference's within crossEncoderLogitTolerance, with the
// second output 0. The BERT reference types the document's tokens 1, as the model
// was trained; llama.cpp's own bert graph types every token 0, and the test shows
// that this matters: the logits of llama.cpp's rank pooling over the same ids are
// off by more than the tolerance for some pair. The XLM-R model has one token
// type, so its ids go to llama.cpp as they are (no tokenInput) and llama.cpp's rank
// pooling agrees with the reference too.
func TestCrossEncoderAgainstReference(t *testing.T) {
	for _, tc := range []struct {
		model, reference string
		typed            bool // two distinct token types: fed as embeddings
	}{
		{bertRerankerModel, "crossencoder-reference.json", true},
		{xlmrRerankerModel, "crossencoder-xlmr-reference.json", false},
	} {
		t.Run(filepath.Base(tc.model), func(t *testing.T) {
			ref := readCrossEncoderReference(t, tc.reference)
			e, err := Open(Config{ModelPath: encoderModel(t, tc.model), Rerank: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if info := e.Info(); info.NEmbd != 2 || !info.Rerank || !info.Encoder {
				t.Fatalf("Info: NEmbd %d, Rerank %t, Encoder %t; want 2, true, true", info.NEmbd, info.Rerank, info.Encoder)
			}
			if typed := e.input != nil; typed != tc.typed {
				t.Fatalf("the engine feeds embeddings (tokenInput): %t; want %t", typed, tc.typed)
			}
			seqs := make([][]int32, len(ref.Pairs))
			for i, p := range ref.Pairs {
				seqs[i] = p.IDs
			}
			ctx := context.Background()
			packed, err := e.Embed(ctx, seqs)
			if err != nil {
				t.Fatal(err)
			}
			worst, llamaRank := 0.0, 0.0
			for i, p := range ref.Pairs {
				alone, err := e.Embed(ctx, seqs[i:i+1])
				if err != nil {
					t.Fatal(err)
				}
				for _, got := range [][]float32{packed[i], alone[0]} {
					if got[1] != 0 {
						t.Errorf("pair %d: second output %g, want 0", i, got[1])
					}
					d := math.Abs(float64(got[0]) - p.Logit)
					worst = max(worst, d)
					if d > crossEncoderLogitTolerance {
						t.Errorf("pair %d (%q, %q): logit %.6f, reference %.6f (difference %.2g > %g)", i, p.Query, p.Document, got[0], p.Logit, d, crossEncoderLogitTolerance)
					}
				}
				if packed[i][0] != alone[0][0] {
					t.Errorf("pair %d: logit %v packed with the others, %v alone; a score must not depend on its neighbours", i, packed[i][0], alone[0][0])
				}
				rank, err := e.pooled(ctx, seqs[i], 4 /* LLAMA_POOLING_TYPE_RANK */, 1)
				if err != nil {
					t.Fatal(err)
				}
				llamaRank = max(llamaRank, math.Abs(float64(rank[0])-p.Logit))
			}
			switch {
			case tc.typed && llamaRank <= crossEncoderLogitTolerance:
				t.Errorf("llama.cpp's rank pooling (every token typed 0) is within %.2g of the reference on every pair; the test model's token types should matter", llamaRank)
			case !tc.typed && llamaRank > crossEncoderLogitTolerance:
				t.Errorf("llama.cpp's rank pooling is off the reference by %.2g on a model of one token type; want within %g", llamaRank, crossEncoderLogitTolerance)
			}
			t.Logf("%d pairs: largest logit difference %.2g (tolerance %g); llama.cpp's own rank pooling (every token typed 0) is off by up to %.2g", len(ref.Pairs), worst, crossEncoderLogitTolerance, llamaRank)
		})
	}
}

// TestCrossEncoderHeadMatchesLlamaRank holds the engine's classifier head (pooler
// with tanh, then the one-output classifier, in float64) to llama.cpp's own rank
// pooling on sequences with no [SEP], whose tokens are all of type 0 either way, so
// that the two differ only in how the head is computed: within 3e-3 (measured
// 1.3e-3 on a logit of -9.35; llama.cpp multiplies the F16 pooler with the [CLS]
// state rounded to F16, the engine keeps float32 and sums in float64).
func TestCrossEncoderHeadMatchesLlamaRank(t *testing.T) {
	e, err := Open(Config{ModelPath: encoderModel(t, bertRerankerModel), Rerank: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	for _, n := range []int{2, 17, 130} {
		seq := make([]int32, n)
		for i := range seq {
			seq[i] = int32(1000 + 37*i%20000) // no [SEP] (102)
		}
		got, err := e.Embed(ctx, [][]int32{seq})
		if err != nil {
			t.Fatal(err)
		}
		rank, err := e.pooled(ctx, seq, 4 /* LLAMA_POOLING_TYPE_RANK */, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d := math.Abs(float64(got[0][0]) - float64(rank[0])); d > 3e-3 {
			t.Errorf("%d tokens: the engine's logit %.6f, llama.cpp's rank pooling %.6f (difference %.2g > 3e-3)", n, got[0][0], rank[0], d)
		} else {
			t.Logf("%d tokens: logit %.6f, llama.cpp's %.6f", n, got[0][0], rank[0])
		}
	}
}

// The random-weight cross-encoders of the other architectures whose classifier
// head llama.cpp's rank pooling computes (cmd/genmodel -arch ARCH -task rerank,
// `make models`), both with MiniLM's WordPiece vocabulary: jina-bert-v2 with its
// one-row classifier as cls.weight (a jina-reranker-v1: tanh(cls·h + b) is the
// score) and two token types; neo-bert with the dense layer (cls.weight, tanh)
// and the one-output cls.output.weight, and no token types.
const (
	jinaRerankerModel = "models/jina-bert-v2-reranker-tiny.gguf"
	neoRerankerModel  = "models/neo-bert-reranker-tiny.gguf"
)

// crossEncoderRankTolerance bounds the engine's score against llama.cpp's own rank
// pooling of the same pair over the same input rows: llama.cpp multiplies the F16
// head matrices with the [CLS] state rounded to F16, the engine keeps float32 and
// sums in float64, and packed sequences take flash attention (K and V in F16).
// Measured: see TestCrossEncoderArchitectures' log.
const crossEncoderRankTolerance = 5e-3

// wordPiecePair is `[CLS] query [SEP] document [SEP]` of random WordPiece ids
// (1000 to 28999, no special token among them) of the given lengths.
func wordPiecePair(seed uint64, query, document int) []int32 {
	rng := rand.New(rand.NewPCG(seed, 0xce))
	seq := []int32{101}
	for range query {
		seq = append(seq, int32(1000+rng.IntN(28000)))
	}
	seq = append(seq, 102)
	for range document {
		seq = append(seq, int32(1000+rng.IntN(28000)))
	}
	return append(seq, 102)
}

// TestCrossEncoderArchitectures scores pairs with every cross-encoder architecture
// llama.cpp's rank pooling scores (bert, jina-bert-v2, neo-bert: family.RankHead),
// all in one Embed call and each alone, and holds every score to llama.cpp's own
// rank pooling of the pair over the same input rows (its graph's head: for
// jina-bert-v2 tanh of the one-row cls.weight, for the others the pooler's tanh
// and cls.output.weight) within crossEncoderRankTolerance, packed equal to alone,
// the second output 0. For jina-bert-v2 the scores must lie in (-1, 1) and spread,
// and llama.cpp's rank pooling over the plain ids (every token typed 0) must miss
// some pair by more than the tolerance, so the test can tell that the document is
// typed 1; neo-bert has no token types and is fed ids. On the old code the engine
// refused to open jina-bert-v2 and neo-bert cross-encoders.
func TestCrossEncoderArchitectures(t *testing.T) {
	for _, tc := range []struct {
		model   string
		typed   bool // two distinct token types: fed as embeddings
		bounded bool // the score is a tanh
	}{
		{bertRerankerModel, true, false},
		{jinaRerankerModel, true, true},
		{neoRerankerModel, false, false},
	} {
		t.Run(filepath.Base(tc.model), func(t *testing.T) {
			e := openModel(t, tc.model, Config{Rerank: true})
			if info := e.Info(); info.NEmbd != 2 || !info.Rerank || !info.Encoder || info.Pooling != gguf.PoolingCLS {
				t.Fatalf("Info: NEmbd %d, Rerank %t, Encoder %t, Pooling %s; want 2, true, true, cls", info.NEmbd, info.Rerank, info.Encoder, info.Pooling)
			}
			if typed := e.input != nil; typed != tc.typed {
				t.Fatalf("the engine feeds embeddings (tokenInput): %t; want %t", typed, tc.typed)
			}
			var seqs [][]int32
			for i, l := range [][2]int{{1, 0}, {3, 5}, {5, 20}, {8, 40}, {2, 90}, {12, 130}, {20, 250}, {6, 400}} {
				seqs = append(seqs, wordPiecePair(uint64(i+1), l[0], l[1]))
			}
			ctx := context.Background()
			packed, err := e.Embed(ctx, seqs)
			if err != nil {
				t.Fatal(err)
			}
			worst, untyped, lo, hi := 0.0, 0.0, math.Inf(1), math.Inf(-1)
			for i, seq := range seqs {
				alone, err := e.Embed(ctx, seqs[i:i+1])
				if err != nil {
					t.Fatal(err)
				}
				got := packed[i]
				if got[1] != 0 || math.IsNaN(float64(got[0])) {
					t.Errorf("pair %d: outputs %v; want [score, 0]", i, got)
				}
				if alone[0][0] != got[0] && runtime.GOARCH == "amd64" {
					t.Errorf("pair %d: score %v packed with the others, %v alone; a score must not depend on its neighbours", i, got[0], alone[0][0])
				}
				rank, err := e.pooledRankTyped(ctx, seq)
				if err != nil {
					t.Fatal(err)
				}
				d := math.Abs(float64(got[0]) - float64(rank))
				worst = max(worst, d)
				if d > crossEncoderRankTolerance {
					t.Errorf("pair %d (%d tokens): score %.6f, llama.cpp's rank pooling %.6f (difference %.2g > %g)", i, len(seq), got[0], rank, d, crossEncoderRankTolerance)
				}
				plain, err := e.pooled(ctx, seq, 4 /* LLAMA_POOLING_TYPE_RANK */, 1)
				if err != nil {
					t.Fatal(err)
				}
				untyped = max(untyped, math.Abs(float64(got[0])-float64(plain[0])))
				lo, hi = min(lo, float64(got[0])), max(hi, float64(got[0]))
			}
			if tc.bounded && (lo <= -1 || hi >= 1 || hi-lo < 0.1) {
				t.Errorf("scores from %.4f to %.4f; a tanh head's lie in (-1, 1), and random pairs should spread over at least 0.1", lo, hi)
			}
			switch {
			case tc.typed && untyped <= crossEncoderRankTolerance:
				t.Errorf("llama.cpp's rank pooling over the ids (every token typed 0) is within %.2g of the engine on every pair; the test model's token types should matter", untyped)
			case !tc.typed && untyped > crossEncoderRankTolerance:
				t.Errorf("llama.cpp's rank pooling over the ids is off by %.2g on a model without token types; want within %g", untyped, crossEncoderRankTolerance)
			}
			t.Logf("%d pairs: scores %.4f to %.4f, largest difference to llama.cpp's rank pooling %.2g (tolerance %g); over the plain ids %.2g", len(seqs), lo, hi, worst, crossEncoderRankTolerance, untyped)
		})
	}
}

// updateRankReference rewrites testdata/crossencoder-archs-reference.json from
// llama.cpp's rank pooling (go test ./backends/llama -run
// TestCrossEncoderArchitecturesReference -update-rank-reference).
var updateRankReference = flag.Bool("update-rank-reference", false, "rewrite testdata/crossencoder-archs-reference.json from llama.cpp's rank pooling")

// crossEncoderArchsReference is testdata/crossencoder-archs-reference.json: for
// each cross-encoder of another architecture than bert, llama.cpp's own rank
// pooling's score of every pair of crossencoder-reference.json (Hugging Face's ids
// of MiniLM's WordPiece vocabulary, which these models carry), over the rows the
// engine feeds (the document typed 1). cmd/embed-stack's TestServeCrossEncoder-
// Architectures holds the real binary to it.
type crossEncoderArchsReference struct {
	Source string `json:"source"`
	Models []struct {
		Model  string    `json:"model"`
		Scores []float64 `json:"scores"`
	} `json:"models"`
}

// crossEncoderFileTolerance bounds a score of the reference file against llama.cpp's
// rank pooling run again, here: the file was written on one CPU's kernels, and
// another CPU variant sums in another order.
const crossEncoderFileTolerance = 5e-4

// TestCrossEncoderArchitecturesReference scores the reference pairs with the
// jina-bert-v2 and neo-bert cross-encoders through llama.cpp's rank pooling (over
// the engine's input rows) and through the engine, and holds both to the committed
// reference: llama.cpp's within crossEncoderFileTolerance (the file is what
// llama.cpp computes), the engine's within crossEncoderRankTolerance.
func TestCrossEncoderArchitecturesReference(t *testing.T) {
	ref := readCrossEncoderReference(t, "crossencoder-reference.json")
	seqs := make([][]int32, len(ref.Pairs))
	for i, p := range ref.Pairs {
		seqs[i] = p.IDs
	}
	path := filepath.Join(testrepo.RootOf(t), "backends", "llama", "testdata", "crossencoder-archs-reference.json")
	var file crossEncoderArchsReference
	if !*updateRankReference {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &file); err != nil {
			t.Fatal(err)
		}
	}
	models := []string{jinaRerankerModel, neoRerankerModel}
	written := crossEncoderArchsReference{Source: "llama.cpp's rank pooling (LLAMA_POOLING_TYPE_RANK, its classifier head in its graph) of each pair of crossencoder-reference.json, fed the engine's input rows (the document's tokens typed 1): TestCrossEncoderArchitecturesReference -update-rank-reference"}
	for m, model := range models {
		t.Run(filepath.Base(model), func(t *testing.T) {
			e := openModel(t, model, Config{Rerank: true})
			ctx := context.Background()
			got, err := e.Embed(ctx, seqs)
			if err != nil {
				t.Fatal(err)
			}
			scores := make([]float64, len(seqs))
			for i, seq := range seqs {
				s, err := e.pooledRankTyped(ctx, seq)
				if err != nil {
					t.Fatal(err)
				}
				scores[i] = float64(s)
			}
			if *updateRankReference {
				written.Models = append(written.Models, struct {
					Model  string    `json:"model"`
					Scores []float64 `json:"scores"`
				}{model, scores})
				return
			}
			if m >= len(file.Models) || file.Models[m].Model != model || len(file.Models[m].Scores) != len(seqs) {
				t.Fatalf("%s does not hold %d scores of %s; rewrite it with -update-rank-reference", path, len(seqs), model)
			}
			worstFile, worstEngine := 0.0, 0.0
			for i, want := range file.Models[m].Scores {
				if d := math.Abs(scores[i] - want); d > crossEncoderFileTolerance {
					t.Errorf("pair %d: llama.cpp's rank pooling gives %.6f, the reference %.6f (difference %.2g > %g)", i, scores[i], want, d, crossEncoderFileTolerance)
				} else {
					worstFile = max(worstFile, d)
				}
				if d := math.Abs(float64(got[i][0]) - want); d > crossEncoderRankTolerance {
					t.Errorf("pair %d (%q, %q): the engine's score %.6f, the reference %.6f (difference %.2g > %g)", i, ref.Pairs[i].Query, ref.Pairs[i].Document, got[i][0], want, d, crossEncoderRankTolerance)
				} else {
					worstEngine = max(worstEngine, d)
				}
			}
			t.Logf("%d pairs: llama.cpp within %.2g of the reference, the engine within %.2g", len(seqs), worstFile, worstEngine)
		})
	}
	if *updateRankReference {
		raw, err := json.MarshalIndent(written, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}

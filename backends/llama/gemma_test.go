package llama

import (
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

// withoutTensors copies the GGUF at src to a temporary file without the named
// tensors, every key and other tensor byte for byte.
func withoutTensors(t *testing.T, src string, drop ...string) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w := gguf.NewWriter()
	for _, k := range f.Keys() {
		v, _ := f.Get(k)
		w.AddKV(k, v)
	}
	dropped := 0
	for _, ti := range f.Tensors() {
		if slices.Contains(drop, ti.Name) {
			dropped++
			continue
		}
		w.AddTensor(ti.Name, ti.Type, ti.Dims, func(out io.Writer) error {
			_, err := io.Copy(out, f.TensorReader(ti))
			return err
		})
	}
	if dropped != len(drop) {
		t.Fatalf("%s holds %d of the tensors %v", src, dropped, drop)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// matVec multiplies a GGUF weight of dims [in, out] (out rows of in values, as
// llama.cpp's converter stores a PyTorch Linear's [out, in]) by x, in float64.
func matVec(w []float64, in int, x []float64) []float64 {
	out := make([]float64, len(w)/in)
	for r := range out {
		row := w[r*in : (r+1)*in]
		s := 0.0
		for i, v := range row {
			s += v * x[i]
		}
		out[r] = s
	}
	return out
}

// TestGemmaDenseProjections checks that the engine's gemma-embedding vectors went
// through EmbeddingGemma's two dense projections, once each and in order: the
// vector of the test model equals, to cosine 0.99999, dense_3 · dense_2 applied in
// float64 (from the GGUF's own weights) to the vector of the same model with those
// two tensors removed, whose mean pooling is then all that is left. Without the
// projections the two vectors are unrelated (the control: cosine at most 0.9).
// TestEncoderArchitectures holds the same vectors to llama.cpp's pooled graph.
func TestGemmaDenseProjections(t *testing.T) {
	full := encoderModel(t, "models/gemma-embedding-tiny.gguf")
	bare := withoutTensors(t, full, "dense_2.weight", "dense_3.weight")
	f, err := gguf.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w2, err := f.TensorFloat64("dense_2.weight")
	if err != nil {
		t.Fatal(err)
	}
	w3, err := f.TensorFloat64("dense_3.weight")
	if err != nil {
		t.Fatal(err)
	}
	open := func(path string) *Engine {
		e, err := Open(Config{ModelPath: path, Threads: 1})
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	withDense, withoutDense := open(full), open(bare)
	h := withDense.Info().NEmbd
	if len(w2) != h*2*h || len(w3) != 2*h*h {
		t.Fatalf("dense_2 has %d values and dense_3 %d; the test model's projections are %d -> %d -> %d", len(w2), len(w3), h, 2*h, h)
	}
	worst, control := 1.0, -1.0
	for i, n := range []int{3, 17, 130, 400} {
		seq := randomSeq(uint64(90+i), n, withDense.Info().NVocab)
		got := embedOne(t, withDense, seq)
		mean := embedOne(t, withoutDense, seq)
		x := make([]float64, h)
		for j, v := range mean {
			x[j] = float64(v)
		}
		want64 := matVec(w3, 2*h, matVec(w2, h, x))
		want := make([]float32, h)
		for j, v := range want64 {
			want[j] = float32(v)
		}
		c := cosine32(got, want)
		if c < 0.99999 {
			t.Errorf("%d tokens: cosine %.9f with dense_3 · dense_2 · the pooled vector, want >= 0.99999", n, c)
		}
		worst = min(worst, c)
		cc := cosine32(got, mean)
		if cc > 0.9 {
			t.Errorf("%d tokens: cosine %.6f between the vectors with and without the projections; they did not change it", n, cc)
		}
		control = max(control, cc)
	}
	t.Logf("lowest cosine with the float64 projections %.9f; highest without them %.6f", worst, control)
}

package worker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/embed-stack/embed-stack/internal/reference"
)

const (
	// sameComputation is the least cosine between two answers of one worker for the
	// same tokens computed in different company (alone, in a batch, concurrently):
	// batching may change the summation order of a kernel, never the function.
	sameComputation = 0.99999
)

// Sequence lengths. Each length has one fixed token sequence (see seqOf), so every
// test and both workers see the same tokens for it.
var (
	// baseLengths sit on both sides of the MLX worker's smaller bucket edges (256,
	// 1024); the float64 reference is computed for those up to refMaxLen.
	baseLengths = []int{1, 2, 17, 255, 256, 257, 1000, 1024, 1025}
	// compareLengths add the largest bucket's edges for the two-worker comparison.
	compareLengths = append(append([]int(nil), baseLengths...), 3000, 8191, 8192)
	// batchLengths are mixed in one request, out of order, for batch invariance.
	batchLengths = []int{257, 1, 1000, 17, 2, 256}
)

// refMaxLen bounds the reference lengths: the float64 reference is quadratic in the
// length and single-threaded per layer; 257 tokens cover a bucket edge and take well
// under a second on the tiny model.
const refMaxLen = 257

// seqOf returns the fixed token sequence of length n: n-1 ids drawn from a generator
// seeded by n, then <|endoftext|>, as the server ends every input. Ids stay below
// both EOS and the vocabulary size, so every one of them is in range.
func seqOf(n int) []int32 {
	limit := min(eosID, suite.vocab-1)
	rng := rand.New(rand.NewPCG(uint64(n), 0x5eed))
	s := make([]int32, n)
	for i := range n - 1 {
		s[i] = int32(rng.IntN(limit))
	}
	last := int32(eosID)
	if eosID >= suite.vocab {
		last = int32(rng.IntN(limit))
	}
	s[n-1] = last
	return s
}

// capped returns the lengths not above max.
func capped(ls []int, max int) []int {
	var out []int
	for _, n := range ls {
		if n <= max {
			out = append(out, n)
		}
	}
	return out
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// cosine of two vectors; NaN when the lengths differ or either is zero, which every
// ≥ comparison then rejects.
func cosine(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.NaN()
	}
	var dot, na, nb float64
	for i := range a {
		dot += a[i] * b[i]
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	if na == 0 || nb == 0 {
		return math.NaN()
	}
	return dot / math.Sqrt(na*nb)
}

func cos32(a, b []float32) float64 { return cosine(f64(a), f64(b)) }

// firstBitDifference returns the first index where a and b differ bit for bit, or -1.
func firstBitDifference(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// ref is the float64 reference model, loaded once.
var ref struct {
	once  sync.Once
	model *reference.Model
	err   error

	mu    sync.Mutex // guards cache
	cache map[int][]float64
}

// referenceVector returns the reference's last-token hidden state for seqOf(n),
// skipping the test when there is no reference.
func referenceVector(t *testing.T, n int) []float64 {
	t.Helper()
	if suite.refPath == "" {
		t.Skip("no REFERENCE_GGUF")
	}
	ref.once.Do(func() {
		ref.cache = map[int][]float64{}
		ref.model, ref.err = reference.Load(suite.refPath)
		if ref.err != nil {
			ref.err = fmt.Errorf("reference.Load(%s): %w", suite.refPath, ref.err)
		}
	})
	if ref.err != nil {
		t.Fatal(ref.err)
	}
	ref.mu.Lock()
	defer ref.mu.Unlock()
	if v, ok := ref.cache[n]; ok {
		return v
	}
	v, err := ref.model.LastToken(seqOf(n))
	if err != nil {
		t.Fatalf("reference LastToken(%d tokens): %v", n, err)
	}
	ref.cache[n] = v
	return v
}

package routing

import (
	"fmt"
	"math"
)

// finish truncates a raw pooled vector to dims (Matryoshka: Qwen3-Embedding was
// trained so that any prefix is a usable embedding) and, when normalize is set,
// L2-normalises it. The sum runs in float64 so the norm does not depend on
// summation order at float32 precision. A vector with a non-finite component or
// zero norm is an engine fault, normalised or not. It never writes to raw (a cached
// vector may be shared).
func finish(raw []float32, dims int, normalize bool) ([]float32, error) {
	if dims > len(raw) {
		return nil, fmt.Errorf("backend returned %d values, fewer than the %d requested", len(raw), dims)
	}
	v := raw[:dims]
	var sum float64
	for _, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("backend returned a non-finite value (%v)", x)
		}
		sum += f * f
	}
	if sum == 0 {
		return nil, fmt.Errorf("backend returned a zero vector")
	}
	if !normalize {
		return append([]float32(nil), v...), nil
	}
	inv := 1 / math.Sqrt(sum)
	out := make([]float32, dims)
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out, nil
}

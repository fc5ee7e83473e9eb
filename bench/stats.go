package bench

import (
	"math"
	"slices"
)

// Summary describes a sample: its size, median, extremes and tail percentiles.
// Percentiles interpolate linearly between order statistics (Hyndman and Fan's
// type 7, what NumPy and R use by default), so the p99 of 20 samples is not simply
// the maximum.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
}

// Summarize returns the summary of xs; the zero Summary for an empty sample. NaNs
// are dropped.
func Summarize(xs []float64) Summary {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return Summary{}
	}
	slices.Sort(s)
	return Summary{
		N:      len(s),
		Median: quantile(s, 0.5),
		Min:    s[0],
		Max:    s[len(s)-1],
		P95:    quantile(s, 0.95),
		P99:    quantile(s, 0.99),
	}
}

// Spread is (max-min)/median: how far apart the repetitions were, as a fraction of
// the figure reported. 0 for fewer than two samples.
func (s Summary) Spread() float64 {
	if s.N < 2 || s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Median
}

// quantile of sorted s at q in [0, 1] (type 7).
func quantile(s []float64, q float64) float64 {
	if len(s) == 1 {
		return s[0]
	}
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

package bench

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{7}, Summary{N: 1, Median: 7, Min: 7, Max: 7, P95: 7, P99: 7}},
		// Type 7: h = q(n-1); 0.95 × 3 = 2.85 → 30 + 0.85 × 10.
		{"four unsorted", []float64{40, 10, 30, 20}, Summary{N: 4, Median: 25, Min: 10, Max: 40, P95: 38.5, P99: 39.7}},
		{"NaN dropped", []float64{math.NaN(), 1, 3}, Summary{N: 2, Median: 2, Min: 1, Max: 3, P95: 2.9, P99: 2.98}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.in)
			if got.N != tt.want.N {
				t.Fatalf("N = %d, want %d", got.N, tt.want.N)
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"median", got.Median, tt.want.Median}, {"min", got.Min, tt.want.Min}, {"max", got.Max, tt.want.Max},
				{"p95", got.P95, tt.want.P95}, {"p99", got.P99, tt.want.P99},
			} {
				if math.Abs(f.got-f.want) > 1e-9 {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
		})
	}
}

func TestSpread(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{100}, 0},
		{[]float64{90, 100, 110}, 0.2},
		{[]float64{50, 100}, 0.5 / 0.75},
	}
	for _, tt := range tests {
		if got := Summarize(tt.in).Spread(); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Spread(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestCosine(t *testing.T) {
	tests := []struct {
		a, b []float32
		want float64
	}{
		{[]float32{1, 0}, []float32{2, 0}, 1},
		{[]float32{1, 0}, []float32{0, 3}, 0},
		{[]float32{1, 1}, []float32{-1, -1}, -1},
		{[]float32{3, 4}, []float32{4, 3}, 24.0 / 25},
	}
	for _, tt := range tests {
		if got := Cosine(tt.a, tt.b); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Cosine(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
	for _, bad := range [][2][]float32{{{1}, {1, 2}}, {{0, 0}, {1, 2}}, {nil, nil}} {
		if got := Cosine(bad[0], bad[1]); !math.IsNaN(got) {
			t.Errorf("Cosine(%v, %v) = %v, want NaN", bad[0], bad[1], got)
		}
	}
}

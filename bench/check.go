package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
)

// DefaultMinCosine is the agreement a target's vectors must reach with the
// reference's before it is timed. Two llama.cpp builds of the same GGUF agree to
// better than 0.9999 on these inputs; a different pooling, a missing end-of-text
// token or a truncated input gives far less on a model whose vectors of different
// texts differ (see CheckResult.Separation).
const DefaultMinCosine = 0.999

// CheckResult says whether a target computes what the reference computes.
type CheckResult struct {
	// Reference is the contender compared against (normally the floor).
	Reference string `json:"reference"`
	// Cosines per check input, in order.
	Cosines []float64 `json:"cosines"`
	// MinCosine is the lowest of Cosines.
	MinCosine float64 `json:"min_cosine"`
	// Threshold is what MinCosine had to reach.
	Threshold float64 `json:"threshold"`
	// Separation is the highest cosine between the reference's vectors of two
	// different check inputs: a check can only tell apart computations that differ
	// by more than the texts do. When it reaches Threshold the check proves
	// nothing, and it fails.
	Separation float64 `json:"separation"`
	// Tokens the target reported for the check request, and the count it had to be.
	Tokens     int `json:"tokens"`
	WantTokens int `json:"want_tokens"`
	// Pass is true when the target may be timed.
	Pass bool `json:"pass"`
	// Reason explains a failure.
	Reason string `json:"reason,omitempty"`
}

// MarshalJSON writes the cosines that are not numbers (NaN: no vectors came back, as
// when the check request failed, or a zero vector) as null, since JSON has no NaN and
// encoding/json refuses the whole report for one: `bench --json` must still write the
// report that says why a target was not timed.
func (r CheckResult) MarshalJSON() ([]byte, error) {
	type plain CheckResult // without this method
	cos := make([]*float64, len(r.Cosines))
	for i := range r.Cosines {
		cos[i] = finite(r.Cosines[i])
	}
	return json.Marshal(struct {
		plain
		Cosines    []*float64 `json:"cosines"`
		MinCosine  *float64   `json:"min_cosine"`
		Separation *float64   `json:"separation"`
	}{plain(r), cos, finite(r.MinCosine), finite(r.Separation)})
}

// finite is &x, or nil (JSON null) when x is NaN or infinite.
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// Check embeds inputs through target and compares them with ref, the reference's
// vectors of the same inputs. It fails when any cosine is below minCosine, when the
// target reports another token count (it truncated or wrapped the text), or when
// the reference's own vectors are too alike for the comparison to mean anything.
func Check(ctx context.Context, target Target, inputs []Input, ref [][]float32, refName string, minCosine float64) CheckResult {
	want := 0
	for _, in := range inputs {
		want += len(in.Tokens)
	}
	r := CheckResult{Reference: refName, Threshold: minCosine, WantTokens: want, MinCosine: math.NaN()}
	r.Separation = separation(ref)
	o := target.Embed(ctx, inputs, true)
	if o.Err != nil {
		r.Reason = fmt.Sprintf("the check request failed: %v", o.Err)
		return r
	}
	r.Tokens = o.Tokens
	r.MinCosine = 1
	for i, v := range o.Vectors {
		c := Cosine(v, ref[i])
		r.Cosines = append(r.Cosines, c)
		r.MinCosine = min(r.MinCosine, c)
	}
	switch {
	case r.Separation >= minCosine:
		r.Reason = fmt.Sprintf("the reference's vectors of different texts agree to cosine %.6f, at or above the threshold %g: this model cannot show whether the target computes the same thing", r.Separation, minCosine)
	case r.MinCosine < minCosine || math.IsNaN(r.MinCosine):
		worst := 0
		for i, c := range r.Cosines {
			if c < r.Cosines[worst] || math.IsNaN(c) {
				worst = i
			}
		}
		r.Reason = fmt.Sprintf("vectors differ from %s's: cosine %.6f on check input %d (%d tokens), below %g; it computes something else (another pooling, no end-of-text token, another tokenization or model)",
			refName, r.MinCosine, worst, len(inputs[worst].Tokens), minCosine)
		if o.Tokens != 0 && o.Tokens != want {
			r.Reason += fmt.Sprintf("; it also reports %d tokens where %d were sent", o.Tokens, want)
		}
	case o.Tokens != 0 && o.Tokens != want:
		// A server that reports no usage (0) is let through on the vectors alone.
		r.Reason = fmt.Sprintf("it reports %d tokens where %d were sent (truncation, another tokenizer, or wrapping of its own)", o.Tokens, want)
	default:
		r.Pass = true
	}
	return r
}

// separation is the highest cosine between two different vectors of vs.
func separation(vs [][]float32) float64 {
	s := -1.0
	for i := range vs {
		for j := i + 1; j < len(vs); j++ {
			s = max(s, Cosine(vs[i], vs[j]))
		}
	}
	return s
}

// Cosine is the cosine similarity of a and b, accumulated in float64; NaN when their
// lengths differ or either is zero.
func Cosine(a, b []float32) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return math.NaN()
	}
	var ab, aa, bb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	if aa == 0 || bb == 0 {
		return math.NaN()
	}
	return ab / math.Sqrt(aa*bb)
}

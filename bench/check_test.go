package bench

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/routing"
)

// byteInputs are inputs whose tokens are their bytes and EOS, as byteTok cuts them.
func byteInputs(texts ...string) []Input {
	in := make([]Input, len(texts))
	for i, s := range texts {
		in[i] = Input{Text: s, Tokens: append(byteTok{}.Encode(s), routing.EOS)}
	}
	return in
}

// rightVec is what a correct server computes for a text; noEOSVec what one that
// forgets the end-of-text token computes.
func rightVec(text string) []float32 { return seqVec(append(byteTok{}.Encode(text), routing.EOS)) }
func noEOSVec(text string) []float32 { return seqVec(byteTok{}.Encode(text)) }

func TestCheck(t *testing.T) {
	inputs := byteInputs("first text", "second, longer text", "third")
	ref := make([][]float32, len(inputs))
	want := 0
	for i, in := range inputs {
		ref[i] = seqVec(in.Tokens)
		want += len(in.Tokens)
	}
	// nudged is rightVec with a small change, well within 0.999.
	nudged := func(text string) []float32 {
		v := rightVec(text)
		v[0] += 0.001
		return v
	}
	tests := []struct {
		name       string
		server     *fakeServer
		ref        [][]float32
		wantPass   bool
		wantReason string
	}{
		{"same vectors", &fakeServer{vec: rightVec, tokens: func([]string) int { return want }}, ref, true, ""},
		{"within tolerance", &fakeServer{vec: nudged, tokens: func([]string) int { return want }}, ref, true, ""},
		{"no usage reported", &fakeServer{vec: rightVec}, ref, true, ""},
		{"forgets EOS", &fakeServer{vec: noEOSVec}, ref, false, "vectors differ from floor's"},
		{"truncates", &fakeServer{vec: rightVec, tokens: func([]string) int { return want - 5 }}, ref, false, "reports 32 tokens where 37 were sent"},
		{"request fails", &fakeServer{vec: rightVec, status: 500}, ref, false, "the check request failed: HTTP 500"},
		{"reference cannot tell texts apart", &fakeServer{vec: rightVec},
			[][]float32{{1, 0, 0}, {1, 0.001, 0}, {1, 0, 0.001}}, false, "cannot show whether"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newTestServer(t, tt.server)
			r := Check(context.Background(), srv, inputs, tt.ref, "floor", DefaultMinCosine)
			if r.Pass != tt.wantPass {
				t.Fatalf("pass %v, want %v (reason %q, cosines %v)", r.Pass, tt.wantPass, r.Reason, r.Cosines)
			}
			if !strings.Contains(r.Reason, tt.wantReason) {
				t.Errorf("reason %q, want it to contain %q", r.Reason, tt.wantReason)
			}
			if r.WantTokens != want {
				t.Errorf("want_tokens %d, want %d", r.WantTokens, want)
			}
			if tt.wantPass && (r.MinCosine < DefaultMinCosine || len(r.Cosines) != len(inputs)) {
				t.Errorf("passed with min cosine %v over %d cosines", r.MinCosine, len(r.Cosines))
			}
		})
	}
}

// TestCheckResultJSON: a check whose request failed has no cosine (NaN), and the
// report of the run must still encode, with null where the number is missing; a
// passing check keeps its numbers.
func TestCheckResultJSON(t *testing.T) {
	inputs := byteInputs("first text", "second, longer text")
	ref := [][]float32{rightVec("first text"), rightVec("second, longer text")}
	failed := Check(context.Background(), newTestServer(t, &fakeServer{vec: rightVec, status: 500}), inputs, ref, "floor", DefaultMinCosine)
	if !math.IsNaN(failed.MinCosine) {
		t.Fatalf("min cosine of a failed check %v, want NaN", failed.MinCosine)
	}
	b, err := json.Marshal(failed)
	if err != nil {
		t.Fatalf("marshal a failed check: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if v, ok := got["min_cosine"]; !ok || v != nil {
		t.Errorf("min_cosine %v (present %v), want null in %s", v, ok, b)
	}
	if got["reason"] != failed.Reason || got["pass"] != false || got["reference"] != "floor" {
		t.Errorf("other fields lost: %s", b)
	}
	passed := Check(context.Background(), newTestServer(t, &fakeServer{vec: rightVec}), inputs, ref, "floor", DefaultMinCosine)
	b, err = json.Marshal(passed)
	if err != nil {
		t.Fatal(err)
	}
	var back CheckResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.MinCosine != passed.MinCosine || back.Separation != passed.Separation || len(back.Cosines) != 2 || back.Cosines[1] != passed.Cosines[1] || !back.Pass {
		t.Errorf("round trip %+v, want %+v", back, passed)
	}
}

// TestCheckSeparation pins the separation: the highest cosine between the
// reference's vectors of different inputs.
func TestCheckSeparation(t *testing.T) {
	got := separation([][]float32{{1, 0}, {0, 1}, {3, 4}})
	if math.Abs(got-0.8) > 1e-12 {
		t.Errorf("separation = %v, want 0.8 (between {0,1} and {3,4})", got)
	}
}

package worker

import (
	"testing"
)

// TestCompareWorkers (WORKER_CMD_B set): worker A and worker B, given the same token
// ids, return vectors agreeing to cosine ≥ WORKER_COSINE_MIN, at lengths on both sides
// of every bucket edge of the MLX worker up to the smaller max_tokens. This is how the
// MLX worker is held against llama.cpp on the F16 GGUF of the same checkpoint.
func TestCompareWorkers(t *testing.T) {
	if suite.cmdB == nil {
		t.Skip("no WORKER_CMD_B to compare with")
	}
	a := sharedWorker(t, "A")
	b := sharedWorker(t, "B")
	t.Logf("A: %q\nB: %q", a.argv, b.argv)
	requireReadyHealth(t, b, b.readyRaw)
	if a.ready.NEmbd != b.ready.NEmbd {
		t.Fatalf("n_embd: A %d, B %d", a.ready.NEmbd, b.ready.NEmbd)
	}
	worst, worstLen := 1.0, 0
	for _, n := range capped(compareLengths, min(a.ready.MaxTokens, b.ready.MaxTokens)) {
		s := [][]int32{seqOf(n)}
		va := a.embed(t, s, nil)[0]
		vb := b.embed(t, s, nil)[0]
		c := cos32(va, vb)
		if worstLen == 0 || !(c >= worst) {
			worst, worstLen = c, n
		}
		if !(c >= suite.cosineMin) {
			t.Errorf("%d tokens: cosine(A, B) = %.7f, want ≥ %g (WORKER_COSINE_MIN)", n, c, suite.cosineMin)
		} else {
			t.Logf("%d tokens: cosine(A, B) = %.9f", n, c)
		}
	}
	t.Logf("worst cosine(A, B) %.9f at %d tokens (bound %g)", worst, worstLen, suite.cosineMin)
}

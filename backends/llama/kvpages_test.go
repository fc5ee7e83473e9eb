package llama

import (
	"context"
	"testing"
	"time"
)

// TestIdleReleaseKV: with IdleRelease the engine hands the long context's KV
// cache pages back to the OS once it has idled that long, once per idle spell and
// never while jobs keep coming, keeps the short context's, and the vectors after
// a release are the same bits as before it (the cells read back as zeros).
func TestIdleReleaseKV(t *testing.T) {
	const idle = 300 * time.Millisecond
	e := openTiny(t, Config{ContextTokens: 1024, Threads: 1, IdleRelease: idle})
	vocab := e.Info().NVocab
	seqs := [][]int32{randomSeq(71, 20, vocab), randomSeq(72, 700, vocab)}
	if e.Info().ShortJobs.Fits(seqs[1:]) {
		t.Fatal("a 700-token sequence must not be a short job")
	}
	ctx := context.Background()
	want, err := e.Embed(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	long := e.long
	if long == nil || long.lctx == nil || e.short.lctx == nil || e.short == long {
		t.Fatal("the short and long contexts were not both created")
	}
	if e.short.kv != nil {
		t.Error("the short context's KV pages are recorded for release")
	}
	if r, total := long.kvResident(); total == 0 || r == 0 {
		t.Fatalf("after a 700-token sequence: %d of %d KV bytes resident; want some (and the buffer found)", r, total)
	}
	// Back to back for four times the idle spell: no release.
	for began := time.Now(); time.Since(began) < 4*idle; {
		if _, err := e.Embed(ctx, seqs[1:]); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.kvReleases.Load(); n != 0 {
		t.Errorf("%d releases while jobs kept coming; want none", n)
	}
	r, total := long.kvResident()
	for deadline := time.Now().Add(10 * idle); r > 0 && time.Now().Before(deadline); {
		time.Sleep(idle / 10)
		r, total = long.kvResident()
	}
	if r != 0 {
		t.Errorf("%d of %d KV bytes resident %v after the last job; want 0", r, total, 10*idle)
	}
	time.Sleep(2 * idle)
	if n := e.kvReleases.Load(); n != 1 {
		t.Errorf("%d releases in one idle spell; want 1", n)
	}
	got, err := e.Embed(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if d := maxAbsDiff(got[i], want[i]); d != 0 {
			t.Errorf("sequence %d (%d tokens): the vector after the release differs by %.3g", i, len(seqs[i]), d)
		}
	}
	if r, total := long.kvResident(); r == 0 {
		t.Errorf("after one more request: %d of %d KV bytes resident; want the cells it wrote", r, total)
	}
}

// TestKVClearedUntouched: llama.cpp clears a new context's KV cache, which with
// es_clear_by_pages faults none of it in: after one 700-token sequence in a
// context of 4096 tokens, under half of the long context's cache is resident (its
// K rows of 700 cells and the first page of each transposed V row; a memset would
// have made all of it resident), and llama_memory_clear with data, as after a
// round with a non-finite value, leaves the cells zero: the same vectors again.
func TestKVClearedUntouched(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 4096, Threads: 1, IdleRelease: time.Hour})
	seq := [][]int32{randomSeq(73, 700, e.Info().NVocab)}
	want, err := e.Embed(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	r, total := e.long.kvResident()
	if total == 0 || r == 0 || r >= total/2 {
		t.Errorf("after a 700-token sequence: %d of %d KV bytes resident; want some, under half", r, total)
	}
	if _, err := do(context.Background(), e, false, func() (bool, error) {
		e.long.clearKVData()
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.long.kvResident(); r != 0 {
		t.Errorf("%d KV bytes resident after llama_memory_clear with data; want 0", r)
	}
	got, err := e.Embed(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(got[0], want[0]); d != 0 {
		t.Errorf("the vector after a cleared cache differs by %.3g", d)
	}
}

// TestIdleReleaseKVOff: without IdleRelease no buffer is recorded and nothing
// is released.
func TestIdleReleaseKVOff(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 1024, Threads: 1})
	if _, err := e.Embed(context.Background(), [][]int32{randomSeq(71, 20, e.Info().NVocab)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(context.Background(), [][]int32{randomSeq(72, 700, e.Info().NVocab)}); err != nil {
		t.Fatal(err)
	}
	if e.short.kv != nil || e.long == nil || e.long.kv != nil {
		t.Fatal("KV pages recorded without IdleRelease")
	}
}

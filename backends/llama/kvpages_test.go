package llama

import (
	"context"
	"testing"
	"time"
)

// TestIdleReleaseKV: with IdleRelease the engine hands the long context's KV
// cache pages back to the OS once it has idled that long, never while jobs keep
// coming, keeps the short context's, and the vectors after a release are the same
// bits as before it (the cells read back as zeros). llama.cpp clears a new
// context's cache, so its pages are all resident until the first release.
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
	if r, total := long.kvResident(); total == 0 || r != total {
		t.Fatalf("before idling: %d of %d KV bytes resident; want all (and the buffer found)", r, total)
	}
	// Back to back for four times the idle spell: no release.
	for began := time.Now(); time.Since(began) < 4*idle; {
		if _, err := e.Embed(ctx, seqs[1:]); err != nil {
			t.Fatal(err)
		}
	}
	if r, total := long.kvResident(); r != total {
		t.Errorf("%d of %d KV bytes resident while jobs kept coming; want all", r, total)
	}
	r, total := long.kvResident()
	for deadline := time.Now().Add(10 * idle); r > 0 && time.Now().Before(deadline); {
		time.Sleep(idle / 10)
		r, total = long.kvResident()
	}
	if r != 0 {
		t.Errorf("%d of %d KV bytes resident %v after the last job; want 0", r, total, 10*idle)
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
	// The round since faulted in only the cells it wrote: 700 of 1024 and more.
	if r, total := long.kvResident(); r == 0 || r >= total {
		t.Errorf("after one more request: %d of %d KV bytes resident; want some, not all", r, total)
	}
}

// TestIdleReleaseKVOff: without IdleRelease no graph callback is set and nothing
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

package llama

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// preemptWaiting is how many short jobs are waiting for the owner goroutine.
func (e *Engine) preemptWaiting() int64 {
	return atomic.LoadInt64((*int64)(unsafe.Pointer(&e.abort.preempt)))
}

// TestShortJobGoesFirst sends a query while a long sequence's first decode call is
// about to run: that call gives way, the query is answered before the long
// sequence, and both vectors are bit for bit what each gives alone.
func TestShortJobGoesFirst(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 1024, Threads: 1})
	vocab := e.Info().NVocab
	long := randomSeq(71, 900, vocab)
	short := randomSeq(72, 20, vocab)
	if lim := e.Info().ShortJobs; !lim.Fits([][]int32{short}) || lim.Fits([][]int32{long}) {
		t.Fatalf("ShortJobs %+v: a 20-token query must be short and a 900-token document not", lim)
	}
	wantLong, wantShort := embedOne(t, e, long), embedOne(t, e, short)

	var calls atomic.Int64            // decode calls completed, of either job
	var longCallsAtShort atomic.Int64 // the document's calls done when the query's ran
	longCallsAtShort.Store(-1)
	var started sync.Once
	shortDone := make(chan []float32, 1)
	var longCalls int64 // the document's calls; read on the owner goroutine
	e.decodeHook = func(int) {
		calls.Add(1)
		if e.nested {
			longCallsAtShort.Store(longCalls)
		} else {
			longCalls++
		}
	}
	e.beforeDecode = func() {
		started.Do(func() {
			go func() {
				v, err := e.Embed(context.Background(), [][]int32{short})
				if err != nil {
					t.Errorf("short Embed: %v", err)
				}
				shortDone <- v[0]
			}()
			// Wait until the query is counted, so this decode call sees it waiting.
			for e.preemptWaiting() == 0 {
				runtime.Gosched()
			}
		})
	}
	v, err := e.Embed(context.Background(), [][]int32{long})
	if err != nil {
		t.Fatal(err)
	}
	e.beforeDecode, e.decodeHook = nil, nil
	gotShort := <-shortDone

	if n := longCallsAtShort.Load(); n != 0 {
		t.Errorf("the query was answered after %d of the document's decode calls; want 0 (its first call gives way)", n)
	}
	// 900 tokens in calls of 256: after the query has run, YieldSmallCalls small
	// calls, then the rest of each planned call whole; plus the query's own call.
	if got, want := calls.Load(), int64(longCallsAfterYield(e, []int{256, 256, 256, 132})+1); got != want {
		t.Errorf("%d decode calls; want %d", got, want)
	}
	if d := maxAbsDiff(gotShort, wantShort); d != 0 {
		t.Errorf("the query's vector, run inside the document's job, differs from alone by %.3g", d)
	}
	if d := maxAbsDiff(v[0], wantLong); d != 0 {
		t.Errorf("the document's vector, after giving way, differs from alone by %.3g", d)
	}
	if n := e.preemptWaiting(); n != 0 {
		t.Errorf("%d short jobs still counted as waiting", n)
	}
}

// longCallsAfterYield counts the decode calls of a long sequence planned in calls
// of the given sizes when short jobs ran before its first call: YieldSmallCalls
// small calls (smallCallTokens, by position), then whole planned calls again.
func longCallsAfterYield(e *Engine, planned []int) int {
	calls, small, pos := 0, YieldSmallCalls, 0
	for _, n := range planned {
		end := pos + n
		for pos < end {
			if small > 0 {
				pos = min(end, pos+e.smallCallTokens(pos))
				small--
			} else {
				pos = end
			}
			calls++
		}
	}
	return calls
}

// TestQueryStreamCannotStallLong sends queries back to back while a long sequence
// is embedded: each is answered, and the long sequence still finishes with its own
// vector, since after giving way it decodes in small calls that do not give way.
func TestQueryStreamCannotStallLong(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 1024, Threads: 1})
	vocab := e.Info().NVocab
	long := randomSeq(81, 300, vocab)
	short := randomSeq(82, 16, vocab)
	t0 := time.Now()
	wantLong := embedOne(t, e, long)
	t1 := time.Now()
	wantShort := embedOne(t, e, short)
	t.Logf("alone: the document %v, a query %v", t1.Sub(t0), time.Since(t1))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	var queries atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := e.Embed(ctx, [][]int32{short})
				if err != nil {
					t.Errorf("query: %v", err)
					return
				}
				if d := maxAbsDiff(v[0], wantShort); d != 0 {
					t.Errorf("query vector differs from alone by %.3g", d)
					return
				}
				queries.Add(1)
			}
		})
	}
	// Let the query stream start first.
	for queries.Load() < 2 {
		runtime.Gosched()
	}
	before := queries.Load()
	t0 = time.Now()
	v, err := e.Embed(ctx, [][]int32{long})
	during := queries.Load() - before
	t.Logf("the document took %v beside %d queries", time.Since(t0), during)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the document beside a stream of queries: %v", err)
	}
	if d := maxAbsDiff(v[0], wantLong); d != 0 {
		t.Errorf("the document's vector differs from alone by %.3g", d)
	}
	// 300 tokens take 2 calls alone; at least one query per call.
	if during < 2 {
		t.Errorf("%d queries answered while the document was embedded; want at least 2", during)
	}
}

// TestLongJobDoesNotJump checks that only short jobs run inside another: a second
// document sent while one is embedded waits for it. The order is read from the
// owner goroutine's decode calls, not from when the two callers wake: the first
// caller may be scheduled after the second job has finished, which is no fault.
func TestLongJobDoesNotJump(t *testing.T) {
	e := openTiny(t, Config{ContextTokens: 1024, Threads: 1})
	vocab := e.Info().NVocab
	first, second := randomSeq(91, 700, vocab), randomSeq(92, 300, vocab)
	if e.Info().ShortJobs.Fits([][]int32{second}) {
		t.Fatal("a 300-token sequence must not be a short job")
	}
	// Each decode call's count within its job, on the owner goroutine; read once
	// both jobs have returned.
	var calls []int
	nestedCalls := 0
	e.decodeHook = func(decodes int) {
		calls = append(calls, decodes)
		if e.nested {
			nestedCalls++
		}
	}
	var started sync.Once
	secondDone := make(chan struct{})
	e.beforeDecode = func() {
		started.Do(func() {
			go func() {
				if _, err := e.Embed(context.Background(), [][]int32{second}); err != nil {
					t.Errorf("second: %v", err)
				}
				close(secondDone)
			}()
			time.Sleep(50 * time.Millisecond) // the second job is waiting by now
		})
	}
	if _, err := e.Embed(context.Background(), [][]int32{first}); err != nil {
		t.Fatal(err)
	}
	<-secondDone
	e.beforeDecode, e.decodeHook = nil, nil
	if nestedCalls != 0 {
		t.Errorf("%d decode calls ran nested inside the first document; want 0", nestedCalls)
	}
	// Two runs of counts, 1..k for the first document then 1..m for the second:
	// a second job that jumped in would restart the count before the first's run
	// ends and the first would then resume past 1.
	runs := 0
	for i, c := range calls {
		switch {
		case c == 1:
			runs++
		case i == 0 || c != calls[i-1]+1:
			t.Fatalf("decode calls' counts %v; want one run per document, one after the other", calls)
		}
	}
	if runs != 2 || len(calls) < 4 {
		t.Errorf("decode calls' counts %v; want two runs (700 then 300 tokens, at least two calls each)", calls)
	}
}

// TestSmallCallTokens checks the small calls' sizes on the 0.6B shape's figures:
// YieldCallTokens at the start, a third of it past 7600 tokens, never under 2.
func TestSmallCallTokens(t *testing.T) {
	e := &Engine{crossover: 3837}
	for _, tt := range []struct{ pos, want int }{{0, 32}, {3837, 16}, {7674, 10}, {1 << 20, 2}} {
		if got := e.smallCallTokens(tt.pos); got != tt.want {
			t.Errorf("smallCallTokens(%d) = %d, want %d", tt.pos, got, tt.want)
		}
	}
	if got := (&Engine{}).smallCallTokens(5000); got != YieldCallTokens {
		t.Errorf("without a crossover: %d, want %d", got, YieldCallTokens)
	}
}

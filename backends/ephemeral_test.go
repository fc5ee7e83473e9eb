package backends

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func newEphemeral(t *testing.T, env ...string) (e *Ephemeral, socketParent, records string) {
	t.Helper()
	socketParent, records = shortTempDir(t), shortTempDir(t)
	e = &Ephemeral{
		Spec:         fakeSpec(t, append([]string{"FAKE_RECORD_DIR=" + records}, env...)...),
		SocketDir:    socketParent,
		ReadyTimeout: 10 * time.Second,
		StopTimeout:  5 * time.Second,
		Logger:       quietLogger(),
	}
	return e, socketParent, records
}

func seqOf(n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(i * 7 % 900) // below the special ids
	}
	return s
}

func TestEphemeralSizesTheContext(t *testing.T) {
	tests := []struct{ tokens, wantCtx int }{
		{1, 64}, {64, 64}, {65, 128}, {8193, 8256},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.tokens), func(t *testing.T) {
			e, socketParent, records := newEphemeral(t)
			seq := seqOf(tt.tokens)
			got, err := e.Embed(context.Background(), seq)
			if err != nil {
				t.Fatal(err)
			}
			if want := fakeVector(seq); !equalVec(got, want) {
				t.Errorf("vector = %v, want %v", got, want)
			}
			runs := recordedArgs(t, records)
			if len(runs) != 1 {
				t.Fatalf("%d workers started, want 1", len(runs))
			}
			for pid, args := range runs {
				want := []string{"worker", "--model", "/models/fake.gguf", "--ctx", strconv.Itoa(tt.wantCtx), "--socket"}
				if len(args) != len(want)+1 || strings.Join(args[:len(want)], " ") != strings.Join(want, " ") ||
					filepath.Base(args[len(want)]) != "worker.sock" || filepath.Dir(filepath.Dir(args[len(want)])) != socketParent {
					t.Errorf("worker args = %q, want %q + a socket under %s", args, want, socketParent)
				}
				if !processGone(pid) {
					t.Errorf("worker %d survived Embed", pid)
				}
			}
			assertEmptyDir(t, socketParent)
		})
	}
}

func TestEphemeralFailures(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		seq   []int32
		ctx   time.Duration
		nEmbd int // Ephemeral.NEmbd
		check func(t *testing.T, err error)
	}{
		{name: "input error", seq: []int32{1, 2, fakeVocab + 1},
			check: func(t *testing.T, err error) {
				var ie *WorkerInputError
				if !errors.As(err, &ie) || ie.Index != 0 || ie.Message != "token id 1001 is outside the vocabulary [0, 1000)" {
					t.Errorf("err = %v, want WorkerInputError for sequence 0", err)
				}
			}},
		{name: "crash at start", env: []string{"FAKE_CRASH_AT_START=ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate 9.1 GiB"}, seq: seqOf(100),
			check: func(t *testing.T, err error) {
				var exit *ExitError
				if !errors.As(err, &exit) || !strings.Contains(err.Error(), "failed to allocate 9.1 GiB") ||
					!strings.HasPrefix(err.Error(), "ephemeral worker (--ctx 128): starting: worker (pid ") {
					t.Errorf("err = %v, want an ExitError quoting stderr", err)
				}
			}},
		{name: "crash while embedding is not retryable", seq: []int32{1, tokCrash},
			check: func(t *testing.T, err error) {
				if errors.Is(err, ErrUnavailable) {
					t.Errorf("err = %v; a dying ephemeral worker must not look retryable", err)
				}
				if !strings.HasPrefix(err.Error(), "the ephemeral worker (--ctx 64) failed while embedding 2 tokens: worker (pid ") ||
					!strings.Contains(err.Error(), "exit status 134; its output ends with:") ||
					!strings.HasSuffix(err.Error(), "GGML_ASSERT(fake) failed: the fake engine aborts") {
					t.Errorf("err = %v", err)
				}
			}},
		{name: "engine failure", seq: []int32{tokFail},
			check: func(t *testing.T, err error) {
				if errors.Is(err, ErrUnavailable) || !strings.HasSuffix(err.Error(), "answered 500: engine: fake decode failed") {
					t.Errorf("err = %v", err)
				}
			}},
		{name: "ctx ends while loading", env: []string{"FAKE_LOAD_DELAY=1m"}, seq: seqOf(10), ctx: 300 * time.Millisecond,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want DeadlineExceeded", err)
				}
			}},
		{name: "ctx ends while embedding", seq: []int32{tokHang}, ctx: 500 * time.Millisecond,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
					t.Errorf("err = %v, want DeadlineExceeded", err)
				}
			}},
		{name: "another model's width", seq: seqOf(10), nEmbd: fakeNEmbd + 1,
			check: func(t *testing.T, err error) {
				var de *DimensionError
				if !errors.As(err, &de) || de.NEmbd != fakeNEmbd || de.Want != fakeNEmbd+1 ||
					!strings.HasPrefix(err.Error(), "ephemeral worker (--ctx 64): the worker (pid ") ||
					!strings.HasSuffix(err.Error(), "computes 8-dimensional vectors, but the model has 9: is it running another model?") {
					t.Errorf("err = %v, want a *DimensionError", err)
				}
			}},
		{name: "empty sequence starts nothing", seq: []int32{},
			check: func(t *testing.T, err error) {
				var ie *WorkerInputError
				if !errors.As(err, &ie) || ie.Index != 0 || ie.Message != "the sequence is empty" {
					t.Errorf("err = %v", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, socketParent, records := newEphemeral(t, tt.env...)
			e.NEmbd = tt.nEmbd
			ctx := context.Background()
			if tt.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctx)
				defer cancel()
			}
			start := time.Now()
			_, err := e.Embed(ctx, tt.seq)
			if err == nil {
				t.Fatal("Embed succeeded")
			}
			tt.check(t, err)
			// A cancelled call returns promptly: the worker is killed, not drained.
			if took := time.Since(start); tt.ctx > 0 && took > tt.ctx+2*time.Second {
				t.Errorf("Embed took %s after a %s deadline", took, tt.ctx)
			}
			assertNoWorkersLeft(t, records)
			assertEmptyDir(t, socketParent)
			if len(tt.seq) == 0 && len(recordedArgs(t, records)) != 0 {
				t.Error("a worker was started for an empty sequence")
			}
		})
	}
}

func TestEphemeralConcurrentCalls(t *testing.T) {
	e, socketParent, records := newEphemeral(t)
	type result struct {
		n   int
		vec []float32
		err error
	}
	lengths := []int{3, 70, 130}
	res := make(chan result, len(lengths))
	for _, n := range lengths {
		go func() {
			v, err := e.Embed(context.Background(), seqOf(n))
			res <- result{n, v, err}
		}()
	}
	for range lengths {
		r := <-res
		if r.err != nil {
			t.Errorf("%d tokens: %v", r.n, r.err)
			continue
		}
		if !equalVec(r.vec, fakeVector(seqOf(r.n))) {
			t.Errorf("%d tokens: wrong vector %v", r.n, r.vec)
		}
	}
	if got := len(recordedArgs(t, records)); got != len(lengths) {
		t.Errorf("%d workers started, want %d", got, len(lengths))
	}
	assertNoWorkersLeft(t, records)
	assertEmptyDir(t, socketParent)
}

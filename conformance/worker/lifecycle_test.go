package worker

import (
	"testing"
)

// TestExit: a worker that has served a request stops with status 0 within exitBound
// when its stdin reaches EOF (its parent died: serve holds the write end) and when it
// gets SIGTERM, and removes its socket. Each case starts its own worker.
func TestExit(t *testing.T) {
	if suite.skipReason != "" {
		t.Skip(suite.skipReason)
	}
	for _, tc := range []struct {
		name string
		stop func(w *worker) error
	}{
		{"stdin EOF", func(w *worker) error { return w.stopByStdin(exitBound) }},
		{"SIGTERM", func(w *worker) error { return w.stopBySignal(exitBound) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := startWorker("exit", suite.cmdA)
			if err != nil {
				t.Fatal(err)
			}
			w.embed(t, [][]int32{seqOf(17)}, nil)
			if err := tc.stop(w); err != nil {
				t.Errorf("%v\noutput:\n%s", err, w.out)
			}
		})
	}
}

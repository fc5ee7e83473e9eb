package server

import (
	"context"
	"time"
)

// releaseWhenIdle calls release (debug.FreeOSMemory) once per idle spell: at a tick
// of every, when no work request is in flight and none has ended since the previous
// tick, unless nothing has ended since the last release either. The first spell
// counts from the call, so that the garbage of loading and of starting the workers
// goes back too.
//
// Why: a serve process's live heap is mostly the tokenizer's tables (about 8 MB for
// Qwen3's 151k tokens and merges), so the Go runtime lets the heap grow to about
// twice that between collections and keeps those pages mapped; an idle server held
// 4 to 8 MB of private memory more than it uses. The cost is one collection per
// idle spell, and page faults for the heap the next request grows again.
func (s *Server) releaseWhenIdle(ctx context.Context, every time.Duration, release func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	var w idleWatch
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.tick(len(s.limits.slots), s.limits.finished.Load()) {
				release()
			}
		}
	}
}

// idleWatch decides, tick by tick, when releaseWhenIdle releases.
type idleWatch struct {
	seen     int64 // finished requests at the previous tick
	released int64 // finished requests at the last release
	any      bool  // a release has happened
}

// tick takes the requests in flight and the count of finished ones now, and says
// whether to release.
func (w *idleWatch) tick(inFlight int, finished int64) bool {
	quiet := inFlight == 0 && finished == w.seen
	w.seen = finished
	if !quiet || w.any && finished == w.released {
		return false
	}
	w.any, w.released = true, finished
	return true
}

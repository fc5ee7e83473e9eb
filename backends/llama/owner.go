package llama

/*
#include "es.h"
*/
import "C"

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// own is the owner goroutine: the only one that touches the llama context after Open.
func (e *Engine) own() {
	defer close(e.done)
	if e.nice > 0 {
		// ggml starts the threads of each decode call from the calling thread, and
		// they inherit its priority; keeping this goroutine on one OS thread keeps
		// every decode call on the thread lowered here. The contexts are created
		// here too (Open), so the threads that live with them inherit it as well.
		runtime.LockOSThread()
		if err := lowerPriority(e.nice); err != nil {
			slog.Warn("llama: lowering the decoding threads' priority failed; they run at normal priority", "nice", e.nice, "err", err)
		}
	}
	// idle fires once the engine has had no job for idleRelease (nil channel: never).
	var idle <-chan time.Time
	var timer *time.Timer
	worked := func() {
		if e.idleRelease <= 0 {
			return
		}
		if timer == nil {
			timer = time.NewTimer(e.idleRelease)
		} else {
			timer.Reset(e.idleRelease)
		}
		idle = timer.C
	}
	for {
		select {
		case <-e.quit:
			return
		case job := <-e.jobs:
			job()
			worked()
		case job := <-e.prio:
			job()
			worked()
		case <-idle:
			idle = nil
			e.releaseKV()
		}
	}
}

// do runs fn on the owner goroutine and returns its result. If ctx ends while fn
// runs, it aborts the decode call in flight and waits for fn to return before
// returning ctx.Err(): fn reads the caller's slices, which must not be in use once
// Embed has returned.
//
// A short job (see Engine.short) may also run inside a long one, where that job
// gives way (yield); fn must then touch only the short context.
func do[T any](ctx context.Context, e *Engine, short bool, fn func() (T, error)) (T, error) {
	var zero T
	type result struct {
		v   T
		err error
	}
	num := e.jobNum.Add(1)
	reply := make(chan result, 1)
	job := func() {
		atomic.StoreInt64((*int64)(unsafe.Pointer(&e.abort.job)), num)
		v, err := fn()
		reply <- result{v, err}
	}
	var prio chan func() // nil: never ready
	if short {
		prio = e.prio
		// Counted before offering the job, so that a decode call in flight gives
		// way at once; uncounted as soon as the job is taken (or given up).
		atomic.AddInt64((*int64)(unsafe.Pointer(&e.abort.preempt)), 1)
	}
	uncount := func() {
		if short {
			atomic.AddInt64((*int64)(unsafe.Pointer(&e.abort.preempt)), -1)
		}
	}
	select {
	case e.jobs <- job:
		uncount()
	case prio <- job:
		uncount()
	case <-ctx.Done():
		uncount()
		return zero, ctx.Err()
	case <-e.quit:
		uncount()
		return zero, ErrClosed
	}
	select {
	case r := <-reply:
		return r.v, r.err
	case <-ctx.Done():
		cancelled := (*int64)(unsafe.Pointer(&e.abort.cancelled))
		for {
			old := atomic.LoadInt64(cancelled)
			if old >= num || atomic.CompareAndSwapInt64(cancelled, old, num) {
				break
			}
		}
		<-reply
		return zero, ctx.Err()
	}
}

// abortRequested reports whether llama.cpp's abort callback would now stop the
// running job.
func (e *Engine) abortRequested() bool {
	return bool(C.es_should_abort(unsafe.Pointer(e.abort)))
}

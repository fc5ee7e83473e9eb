package server

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
)

// Defaults of the limits in Config.
const (
	// DefaultMaxConcurrentRequests bounds the work requests in flight. The warm
	// worker takes one batch at a time, so more requests than this only wait longer;
	// each may hold up to MaxBodyBytes of body.
	DefaultMaxConcurrentRequests = 64
	// DefaultRequestTimeout bounds one work request, time spent waiting for a worker
	// included. The longest legitimate request (2048 inputs, 300000 tokens) takes
	// minutes on a CPU.
	DefaultRequestTimeout = 10 * time.Minute
	// overloadRetryAfter is the Retry-After of a 429: a short wait, since a slot
	// frees as soon as any request in flight finishes.
	overloadRetryAfter = time.Second
)

// overloadError is a request refused at admission because MaxConcurrentRequests
// are in flight (429 with Retry-After).
type overloadError struct {
	limit      int
	retryAfter time.Duration
}

func (e *overloadError) Error() string {
	return "The server is already handling its limit of " + strconv.Itoa(e.limit) +
		" concurrent requests (--max-concurrent-requests); retry after " + strconv.Itoa(retrySeconds(e.retryAfter)) + "s."
}

// retrySeconds rounds a delay up to whole seconds, at least 1, for Retry-After.
func retrySeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// limiter admits at most cap(slots) requests at once and counts what it did.
// Refusing rather than queueing keeps memory bounded (every admitted request may
// hold a large body) and tells clients to back off at once; the official SDKs
// retry a 429 after its Retry-After.
type limiter struct {
	slots    chan struct{}
	rejected atomic.Int64
	timedOut atomic.Int64
	// finished counts the admitted requests that have ended; with slots it tells
	// an idle spell (idle.go).
	finished atomic.Int64
}

func newLimiter(n int) *limiter {
	return &limiter{slots: make(chan struct{}, n)}
}

// admit is the middleware of the work routes: admission, then the request
// deadline. The deadline reaches the workers through the request context; when it
// passes, the handler's error maps to 504 (errors.go), and an ephemeral worker
// still embedding for the request is killed.
func (s *Server) admit() gin.HandlerFunc {
	l, timeout := s.limits, s.Config.RequestTimeout
	return func(c *gin.Context) {
		select {
		case l.slots <- struct{}{}:
		default:
			l.rejected.Add(1)
			writeError(c, &overloadError{limit: cap(l.slots), retryAfter: overloadRetryAfter})
			return
		}
		defer func() {
			l.finished.Add(1)
			<-l.slots
		}()
		orig := c.Request
		ctx, cancel := context.WithTimeout(orig.Context(), timeout)
		defer cancel()
		c.Request = orig.WithContext(ctx)
		c.Next()
		// Outer middleware reads the context after the handler (spans, metrics):
		// give them back the request's own, not the cancelled deadline.
		c.Request = orig
		if ctx.Err() == context.DeadlineExceeded && c.Writer.Status() == http.StatusGatewayTimeout {
			l.timedOut.Add(1)
		}
	}
}

// debugVars serves GET /debug/vars (Config.DebugVars): a flat JSON object of the
// process's runtime figures and the limiter's counters, plus Server.Vars. Unlike
// expvar's handler it never shows the command line, which may hold an API key.
// With ?gc=1 it collects garbage first, so that heap_alloc_bytes is the live heap:
// what a leak check compares. Twice, because sync.Pool contents survive one
// collection.
func (s *Server) debugVars(c *gin.Context) {
	if c.Query("gc") == "1" {
		runtime.GC()
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	vars := gin.H{
		"goroutines":               runtime.NumGoroutine(),
		"heap_alloc_bytes":         ms.HeapAlloc,
		"heap_inuse_bytes":         ms.HeapInuse,
		"heap_sys_bytes":           ms.HeapSys,
		"gc_cycles":                ms.NumGC,
		"requests_in_flight":       len(s.limits.slots),
		"max_concurrent_requests":  cap(s.limits.slots),
		"requests_rejected_total":  s.limits.rejected.Load(),
		"requests_timed_out_total": s.limits.timedOut.Load(),
	}
	if s.conns != nil {
		vars["connections_open"] = s.conns.open.Load()
		vars["connections_refused_total"] = s.conns.refused.Load()
	}
	vars["body_bytes_held"] = s.bodies.held.Load()
	if s.Vars != nil {
		for k, v := range s.Vars() {
			vars[k] = v
		}
	}
	c.JSON(http.StatusOK, vars)
}

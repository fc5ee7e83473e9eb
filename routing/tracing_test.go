package routing

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/embed-stack/embed-stack/telemetry/telemetrytest"
)

// TestBatchSpans: two requests whose warm calls share one batched worker call. The
// batch is one routing.batch span, in the first caller's trace, linked to both
// callers' routing.queue spans, which link back to it.
func TestBatchSpans(t *testing.T) {
	rec := telemetrytest.Install()
	r, warm, _ := newRouter(Config{BatchWindow: 300 * time.Millisecond, BatchMaxTokens: 1 << 20})
	// As after a batch of several calls, so that the first request waits for the
	// second instead of going at once on the idle lane (batcher.idleSend).
	r.init()
	bt := r.warm.(*batcher)
	bt.mu.Lock()
	bt.lanes[bulkLane].lastCalls = 2
	bt.mu.Unlock()
	count0, sum0 := rec.Metric(t, "embed_stack.batch.requests")
	roots := make([]trace.Span, 2)
	var wg sync.WaitGroup
	for i, text := range []string{"first", "second"} {
		ctx, root := rec.Tracer.Start(context.Background(), "request")
		roots[i] = root
		wg.Go(func() {
			defer root.End()
			if _, err := r.Embed(ctx, &Request{Texts: []string{text}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	warm.mu.Lock()
	calls := len(warm.calls)
	warm.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d warm calls, want the two requests in one batch", calls)
	}

	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var batches, queues []sdktrace.ReadOnlySpan
	for _, s := range rec.Spans.Ended() {
		tid := s.SpanContext().TraceID()
		if tid != roots[0].SpanContext().TraceID() && tid != roots[1].SpanContext().TraceID() {
			continue
		}
		byID[s.SpanContext().SpanID()] = s
		switch s.Name() {
		case "routing.batch":
			batches = append(batches, s)
		case "routing.queue":
			queues = append(queues, s)
		}
	}
	if len(batches) != 1 || len(queues) != 2 {
		t.Fatalf("%d routing.batch and %d routing.queue spans, want 1 and 2", len(batches), len(queues))
	}
	batch := batches[0]
	if p, ok := byID[batch.Parent().SpanID()]; !ok || p.Name() != "routing.warm" {
		t.Errorf("routing.batch's parent is not a caller's routing.warm")
	}
	var linked []trace.SpanID
	for _, l := range batch.Links() {
		linked = append(linked, l.SpanContext.SpanID())
	}
	for _, q := range queues {
		if p, ok := byID[q.Parent().SpanID()]; !ok || p.Name() != "routing.warm" || p.SpanContext().TraceID() != q.SpanContext().TraceID() {
			t.Errorf("a routing.queue span is not under its own request's routing.warm")
		}
		if !slices.Contains(linked, q.SpanContext().SpanID()) {
			t.Errorf("routing.batch does not link to the routing.queue of trace %s", q.SpanContext().TraceID())
		}
		if len(q.Links()) != 1 || q.Links()[0].SpanContext.SpanID() != batch.SpanContext().SpanID() {
			t.Errorf("routing.queue links %v, want the batch %s", q.Links(), batch.SpanContext().SpanID())
		}
		// Queued until the batch was sent: the window, since it never filled.
		if d := q.EndTime().Sub(q.StartTime()); d < 250*time.Millisecond {
			t.Errorf("routing.queue lasted %s, want about the 300ms window", d)
		}
		if !q.EndTime().After(batch.StartTime().Add(-time.Millisecond)) {
			t.Errorf("routing.queue ended before the batch started")
		}
	}
	want := map[string]int64{"embed_stack.batch.requests": 2, "embed_stack.batch.sequences": 2, "embed_stack.batch.tokens": int64(len("first") + len("second") + 2)}
	for _, kv := range batch.Attributes() {
		if w, ok := want[string(kv.Key)]; ok {
			if kv.Value.AsInt64() != w {
				t.Errorf("routing.batch %s = %d, want %d", kv.Key, kv.Value.AsInt64(), w)
			}
			delete(want, string(kv.Key))
		}
	}
	if len(want) > 0 {
		t.Errorf("routing.batch lacks %v", want)
	}
	if count, sum := rec.Metric(t, "embed_stack.batch.requests"); count-count0 != 1 || sum-sum0 != 2 {
		t.Errorf("embed_stack.batch.requests moved by count %v sum %v, want 1 and 2", count-count0, sum-sum0)
	}
}

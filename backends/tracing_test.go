package backends

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/embed-stack/embed-stack/telemetry/stage"
	"github.com/embed-stack/embed-stack/telemetry/telemetrytest"
)

// recorder returns the recording providers, installed as the globals on first use
// (telemetrytest.Install). The fake workers, child processes, install none.
func recorder() *telemetrytest.Recorder { return telemetrytest.Install() }

func intAttr(s sdktrace.ReadOnlySpan, key string) int64 {
	if v, ok := telemetrytest.Attr(s, key); ok {
		return v.AsInt64()
	}
	return -1
}

func strAttr(s sdktrace.ReadOnlySpan, key string) string {
	v, _ := telemetrytest.Attr(s, key)
	return v.AsString()
}

// spawnCount reads embed_stack.worker.spawns{role,outcome} (and the labels in
// extra, such as a model).
func spawnCount(t *testing.T, role, outcome string, extra ...attribute.KeyValue) int64 {
	t.Helper()
	v, _ := recorder().Metric(t, "embed_stack.worker.spawns", append([]attribute.KeyValue{attribute.String("role", role), attribute.String("outcome", outcome)}, extra...)...)
	return int64(v)
}

// onlyPID returns the one pid the fake workers recorded.
func onlyPID(t *testing.T, records string) int {
	t.Helper()
	runs := recordedArgs(t, records)
	if len(runs) != 1 {
		t.Fatalf("%d workers started, want 1", len(runs))
	}
	for pid := range runs {
		return pid
	}
	return 0
}

func TestEphemeralSpans(t *testing.T) {
	rec := recorder()
	e, _, records := newEphemeral(t)
	ready := spawnCount(t, roleEphemeral, "ready")
	ctx, root := rec.Tracer.Start(context.Background(), "request")
	seq := seqOf(100)
	if _, err := e.Embed(ctx, seq); err != nil {
		t.Fatal(err)
	}
	root.End()
	pid := onlyPID(t, records)
	spans := rec.Trace(root.SpanContext().TraceID())
	for _, name := range []string{"backends.ephemeral", "backends.spawn", "worker.call", "backends.stop"} {
		if len(spans[name]) != 1 {
			t.Fatalf("%d spans %s, want 1; trace has %v", len(spans[name]), name, names(spans))
		}
	}
	eph, spawn, call, stop := spans["backends.ephemeral"][0], spans["backends.spawn"][0], spans["worker.call"][0], spans["backends.stop"][0]
	if eph.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("backends.ephemeral is not a child of the request")
	}
	for _, s := range []sdktrace.ReadOnlySpan{spawn, call, stop} {
		if s.Parent().SpanID() != eph.SpanContext().SpanID() {
			t.Errorf("%s is not a child of backends.ephemeral", s.Name())
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("%s status %v", s.Name(), s.Status())
		}
	}
	// In order: spawn (model load included), the call, the stop.
	if !spawn.EndTime().Before(call.StartTime().Add(time.Millisecond)) || !call.EndTime().Before(stop.StartTime().Add(time.Millisecond)) {
		t.Errorf("stages overlap: spawn ends %s, call %s–%s, stop starts %s",
			spawn.EndTime().Format(time.StampMicro), call.StartTime().Format(time.StampMicro), call.EndTime().Format(time.StampMicro), stop.StartTime().Format(time.StampMicro))
	}
	if got := intAttr(eph, "embed_stack.batch.tokens"); got != 100 {
		t.Errorf("backends.ephemeral tokens %d, want 100", got)
	}
	if got := intAttr(eph, "embed_stack.worker.ctx"); got != 128 {
		t.Errorf("backends.ephemeral ctx %d, want 128", got)
	}
	if got, role := intAttr(eph, "embed_stack.worker.pid"), strAttr(eph, "embed_stack.worker.role"); got != int64(pid) || role != roleEphemeral {
		t.Errorf("backends.ephemeral pid %d, role %q; want the worker's %d, %s (docs/observability.md)", got, role, pid, roleEphemeral)
	}
	if got := intAttr(spawn, "embed_stack.worker.pid"); got != int64(pid) {
		t.Errorf("backends.spawn pid %d, want the worker's %d", got, pid)
	}
	if got := strAttr(spawn, "embed_stack.worker.role"); got != roleEphemeral {
		t.Errorf("backends.spawn role %q", got)
	}
	if got := intAttr(call, "embed_stack.worker.pid"); got != int64(pid) {
		t.Errorf("worker.call pid %d, want the worker's %d", got, pid)
	}
	if call.SpanKind() != trace.SpanKindClient {
		t.Errorf("worker.call kind %v, want client", call.SpanKind())
	}
	if d := spawnCount(t, roleEphemeral, "ready") - ready; d != 1 {
		t.Errorf("spawns{ephemeral,ready} moved by %d, want 1", d)
	}
}

// TestEphemeralMetricsByModel: an ephemeral worker started for a request of a
// model (stage.WithModel, as the router marks it) counts its spawn, spawn time,
// call size and stages under that model's label (issue 17), and under no other.
func TestEphemeralMetricsByModel(t *testing.T) {
	rec := recorder()
	e, _, _ := newEphemeral(t)
	model := stage.ModelKey.String("bk-model")
	ctx := stage.WithModel(context.Background(), "bk-model")
	bare := spawnCount(t, roleEphemeral, "ready")
	if _, err := e.Embed(ctx, seqOf(100)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(ctx, seqOf(50)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  float64
	}{
		{"embed_stack.worker.spawns", []attribute.KeyValue{attribute.String("role", roleEphemeral), attribute.String("outcome", "ready"), model}, 2},
		{"embed_stack.worker.spawn.duration", []attribute.KeyValue{attribute.String("role", roleEphemeral), model}, 2},
		{"embed_stack.batch.sequences", []attribute.KeyValue{attribute.String("route", roleEphemeral), model}, 2},
		{"embed_stack.batch.tokens", []attribute.KeyValue{attribute.String("route", roleEphemeral), model}, 2},
		{stage.MetricName, []attribute.KeyValue{attribute.String("stage", "backends.spawn"), model}, 2},
		{stage.MetricName, []attribute.KeyValue{attribute.String("stage", "backends.stop"), model}, 2},
	} {
		if got, _ := rec.Metric(t, c.name, c.attrs...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.attrs, got, c.want)
		}
	}
	if d := spawnCount(t, roleEphemeral, "ready") - bare; d != 0 {
		t.Errorf("spawns without a model label moved by %d, want 0", d)
	}
}

func TestEphemeralSpawnFailureSpans(t *testing.T) {
	rec := recorder()
	e, _, _ := newEphemeral(t, "FAKE_LOAD_FAIL=no such tensor")
	failed := spawnCount(t, roleEphemeral, "failed")
	ctx, root := rec.Tracer.Start(context.Background(), "request")
	_, err := e.Embed(ctx, seqOf(10))
	root.End()
	if err == nil {
		t.Fatal("Embed succeeded with a worker that cannot load")
	}
	spans := rec.Trace(root.SpanContext().TraceID())
	if len(spans["backends.spawn"]) != 1 || len(spans["backends.ephemeral"]) != 1 {
		t.Fatalf("trace has %v, want one backends.spawn and one backends.ephemeral", names(spans))
	}
	if n := len(spans["worker.call"]); n != 0 {
		t.Errorf("%d worker.call spans for a worker that never became ready", n)
	}
	spawn := spans["backends.spawn"][0]
	if spawn.Status().Code != codes.Error || !strings.Contains(spawn.Status().Description, "no such tensor") {
		t.Errorf("backends.spawn status %v; want Error quoting the worker's output", spawn.Status())
	}
	if got := strAttr(spawn, "error.type"); got != "*backends.ExitError" {
		t.Errorf("backends.spawn error.type %q, want *backends.ExitError", got)
	}
	if got := spans["backends.ephemeral"][0].Status().Code; got != codes.Error {
		t.Errorf("backends.ephemeral status %v, want Error", got)
	}
	if d := spawnCount(t, roleEphemeral, "failed") - failed; d != 1 {
		t.Errorf("spawns{ephemeral,failed} moved by %d, want 1", d)
	}
}

func TestWarmSpawnSpan(t *testing.T) {
	rec := recorder()
	w, _, records := newWarm(t)
	before := len(rec.Spans.Ended())
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	pid := onlyPID(t, records)
	var spawn sdktrace.ReadOnlySpan
	for _, s := range rec.Spans.Ended()[before:] {
		if s.Name() == "backends.spawn" && intAttr(s, "embed_stack.worker.pid") == int64(pid) {
			spawn = s
		}
	}
	if spawn == nil {
		t.Fatalf("no backends.spawn span with the warm worker's pid %d", pid)
	}
	// A warm start belongs to no request: it is a trace of its own.
	if spawn.Parent().IsValid() {
		t.Errorf("warm backends.spawn has parent %s; want a root span", spawn.Parent().SpanID())
	}
	if got := strAttr(spawn, "embed_stack.worker.role"); got != roleWarm {
		t.Errorf("role %q, want warm", got)
	}
	if pid != w.PID() {
		t.Errorf("recorded pid %d, Warm.PID %d", pid, w.PID())
	}
}

// TestStartProcPassesTraceContext checks the environment carrier: a worker started
// under a span finds that span in TRACEPARENT, so its model-load span can join the
// trace.
func TestStartProcPassesTraceContext(t *testing.T) {
	rec := recorder()
	dir := shortTempDir(t)
	out := filepath.Join(dir, "tp")
	spec := WorkerSpec{Path: "/bin/sh", Args: []string{"-c", `printf %s "$TRACEPARENT" > "$0"; exec sleep 30`, out}}
	if _, err := os.Stat(spec.Path); err != nil {
		t.Skip("no /bin/sh")
	}
	tests := []struct {
		name   string
		traced bool
	}{{"under a span", true}, {"without a span", false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_ = os.Remove(out)
			ctx := context.Background()
			var span trace.Span
			if tt.traced {
				ctx, span = rec.Tracer.Start(ctx, "spawn")
				defer span.End()
			}
			p, err := startProc(ctx, spec, filepath.Join(dir, "w.sock"), nil, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer p.kill()
			eventually(t, 10*time.Second, "the child to write TRACEPARENT", func() bool {
				_, err := os.Stat(out)
				return err == nil
			})
			time.Sleep(20 * time.Millisecond) // printf has created the file; let it finish writing
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tt.traced {
				sc := span.SpanContext()
				want = fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
			}
			if string(got) != want {
				t.Errorf("child's TRACEPARENT = %q, want %q", got, want)
			}
		})
	}
}

func TestWorkerHandlerSpan(t *testing.T) {
	rec := recorder()
	var mu sync.Mutex
	var seen trace.SpanContext
	engine := &fakeEngine{embedHook: func(ctx context.Context, _ [][]int32) {
		mu.Lock()
		seen = trace.SpanContextFromContext(ctx)
		mu.Unlock()
	}}
	h := NewWorkerHandler(engine, EngineInfo{NEmbd: fakeNEmbd, MaxTokens: 64, MaxBatchTokens: 64, Model: "m"}, nil)
	tests := []struct {
		name       string
		body       string
		status     int
		wantStatus codes.Code
		wantDesc   string
	}{
		{"ok", `{"tokens":[[1,2,3],[4]]}`, 200, codes.Unset, ""},
		{"engine input error", `{"tokens":[[1,2,1001]]}`, 400, codes.Error, "token id 1001 is outside the vocabulary [0, 1000)"},
		{"engine failure", `{"tokens":[[999]]}`, 500, codes.Error, "engine: fake decode failed"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tid trace.TraceID
			var sid trace.SpanID
			tid[0], sid[0] = byte(0x40+i), byte(0x50+i)
			tid[15], sid[7] = 1, 1
			req := httptest.NewRequest(http.MethodPost, "/embed", strings.NewReader(tt.body))
			req.Header.Set("traceparent", fmt.Sprintf("00-%s-%s-01", tid, sid))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			spans := rec.Trace(tid)["worker.embed"]
			if len(spans) != 1 {
				t.Fatalf("%d worker.embed spans in the caller's trace, want 1", len(spans))
			}
			s := spans[0]
			if s.Parent().SpanID() != sid || !s.Parent().IsRemote() || s.SpanKind() != trace.SpanKindServer {
				t.Errorf("parent %s remote %v kind %v; want the caller's %s, remote, server", s.Parent().SpanID(), s.Parent().IsRemote(), s.SpanKind(), sid)
			}
			if s.Status().Code != tt.wantStatus || s.Status().Description != tt.wantDesc {
				t.Errorf("status %v %q, want %v %q", s.Status().Code, s.Status().Description, tt.wantStatus, tt.wantDesc)
			}
			if got := intAttr(s, "http.response.status_code"); got != int64(tt.status) {
				t.Errorf("status attribute %d", got)
			}
			if got := intAttr(s, "embed_stack.worker.pid"); got != int64(os.Getpid()) {
				t.Errorf("pid attribute %d, want %d", got, os.Getpid())
			}
			mu.Lock()
			defer mu.Unlock()
			if seen.SpanID() != s.SpanContext().SpanID() {
				t.Errorf("the engine ran under span %s, want worker.embed's %s", seen.SpanID(), s.SpanContext().SpanID())
			}
		})
	}
}

func names(spans map[string][]sdktrace.ReadOnlySpan) string {
	var out []string
	for n, s := range spans {
		out = append(out, n+"×"+strconv.Itoa(len(s)))
	}
	return strings.Join(out, " ")
}

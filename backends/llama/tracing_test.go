package llama

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/embed-stack/embed-stack/telemetry/telemetrytest"
)

// TestEmbedSpans checks the engine's stages: llama.embed with its input sizes, and
// under it llama.queue (waiting for the owner goroutine) then llama.decode; an input
// refused before any decode gets no queue or decode span.
func TestEmbedSpans(t *testing.T) {
	rec := telemetrytest.Install()
	e := openTiny(t, Config{ContextTokens: 256, BatchTokens: 64, MaxSeqs: 8})
	vocab := e.Info().NVocab

	tests := []struct {
		name       string
		seqs       [][]int32
		wantStages []string
		wantStatus codes.Code
		wantDesc   string
		wantType   string
	}{
		{name: "packed", seqs: [][]int32{randomSeq(1, 100, vocab), randomSeq(2, 7, vocab)},
			wantStages: []string{"llama.queue", "llama.decode"}},
		{name: "out of the vocabulary", seqs: [][]int32{{1, int32(vocab)}},
			wantStatus: codes.Error, wantDesc: "input 0: token 1 is id " + strconv.Itoa(vocab) + ", outside the vocabulary [0, " + strconv.Itoa(vocab) + ")", wantType: "*llama.InputError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, root := rec.Tracer.Start(context.Background(), "worker.embed")
			_, err := e.Embed(ctx, tt.seqs)
			root.End()
			if (err != nil) != (tt.wantStatus == codes.Error) {
				t.Fatalf("Embed error %v", err)
			}
			byName := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range rec.Spans.Ended() {
				if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
					byName[s.Name()] = s
				}
			}
			if len(byName) != 2+len(tt.wantStages) {
				t.Errorf("spans %v, want worker.embed, llama.embed and %v", keys(byName), tt.wantStages)
			}
			emb, ok := byName["llama.embed"]
			if !ok {
				t.Fatal("no llama.embed span")
			}
			if emb.Parent().SpanID() != root.SpanContext().SpanID() {
				t.Errorf("llama.embed is not a child of the caller's span")
			}
			if emb.Status().Code != tt.wantStatus || emb.Status().Description != tt.wantDesc {
				t.Errorf("status %v %q, want %v %q", emb.Status().Code, emb.Status().Description, tt.wantStatus, tt.wantDesc)
			}
			tokens := 0
			for _, s := range tt.seqs {
				tokens += len(s)
			}
			attrs := map[string]int64{}
			typ := ""
			for _, kv := range emb.Attributes() {
				if kv.Key == "error.type" {
					typ = kv.Value.AsString()
				} else {
					attrs[string(kv.Key)] = kv.Value.AsInt64()
				}
			}
			if attrs["embed_stack.batch.sequences"] != int64(len(tt.seqs)) || attrs["embed_stack.batch.tokens"] != int64(tokens) ||
				attrs["embed_stack.llama.ctx"] != 256 || attrs["embed_stack.llama.batch"] != 64 {
				t.Errorf("attributes %v; want %d sequences, %d tokens, ctx 256, batch 64", attrs, len(tt.seqs), tokens)
			}
			if typ != tt.wantType {
				t.Errorf("error.type %q, want %q", typ, tt.wantType)
			}
			var prevEnd time.Time
			for _, name := range tt.wantStages {
				s, ok := byName[name]
				if !ok {
					t.Errorf("no %s span", name)
					continue
				}
				if s.Parent().SpanID() != emb.SpanContext().SpanID() {
					t.Errorf("%s is not a child of llama.embed", name)
				}
				if s.StartTime().Before(prevEnd) {
					t.Errorf("%s starts before the previous stage ended", name)
				}
				prevEnd = s.EndTime()
			}
			if d, ok := byName["llama.decode"]; ok && d.EndTime().Sub(d.StartTime()) <= 0 {
				t.Errorf("llama.decode lasted %s", d.EndTime().Sub(d.StartTime()))
			}
		})
	}
}

func keys(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

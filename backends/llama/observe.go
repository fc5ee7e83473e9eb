package llama

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

var tracer = otel.Tracer("github.com/embed-stack/embed-stack/backends/llama")

// startEmbed begins the stage llama.embed: one Embed call, validation included.
func (e *Engine) startEmbed(ctx context.Context, seqs [][]int32) (context.Context, stage.Stage) {
	ctx, st := stage.Start(ctx, tracer, "llama.embed")
	if st.Recording() {
		tokens, longest := 0, 0
		for _, s := range seqs {
			tokens += len(s)
			longest = max(longest, len(s))
		}
		st.SetAttributes(
			attribute.Int("embed_stack.batch.sequences", len(seqs)),
			attribute.Int("embed_stack.batch.tokens", tokens),
			attribute.Int("embed_stack.llama.longest_sequence", longest),
			attribute.Int("embed_stack.llama.ctx", e.info.ContextTokens),
			attribute.Int("embed_stack.llama.batch", e.info.BatchTokens))
	}
	return ctx, st
}

// run embeds on the owner goroutine as two stages: llama.queue, the wait for the
// goroutine (other calls' decoding), and llama.decode, the packed decode calls and
// the reading of each sequence's last-token output (the pooling).
func (e *Engine) run(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	_, queue := stage.Start(ctx, tracer, "llama.queue")
	var once sync.Once
	endQueue := func(err error) { once.Do(func() { queue.End(err) }) }
	v, err := do(ctx, e, e.info.ShortJobs.Fits(seqs), func() ([][]float32, error) {
		endQueue(nil)
		_, dec := stage.Start(ctx, tracer, "llama.decode")
		v, err := e.embed(ctx, seqs)
		dec.End(err)
		return v, err
	})
	// do returns either after the job ran, or without having handed it over (ctx
	// ended or the engine closed while it waited).
	endQueue(err)
	return v, err
}

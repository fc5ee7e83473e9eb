package routing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// scope is the instrumentation scope of routing's spans and metrics.
const scope = "github.com/embed-stack/embed-stack/routing"

var tracer = otel.Tracer(scope)

// untraced makes the spans of Prepare, which has no context to put them in: made
// by tracer, they would each start a trace of their own. Their stage durations are
// still recorded.
var untraced = tracenoop.NewTracerProvider().Tracer(scope)

// Values of the route label and attribute: which kind of worker embeds an input.
const (
	routeWarm      = "warm"
	routeEphemeral = "ephemeral"
)

// metricOpts are a router's measurement options, built once (init): an attribute
// set sorts and allocates, and so does a variadic argument list that is not an
// existing slice. Each carries the router's model label (Config.Model) when it
// has one.
type metricOpts struct {
	warm, ephemeral []metric.AddOption    // route="warm", route="ephemeral"
	model           []metric.RecordOption // the model label alone (or nothing)
	modelAdd        []metric.AddOption    // the same, for counters
}

func newMetricOpts(model string) metricOpts {
	var labels []attribute.KeyValue
	if model != "" {
		labels = append(labels, stage.ModelKey.String(model))
	}
	route := func(route string) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{attribute.String("route", route)}, labels...)...))}
	}
	return metricOpts{
		warm:      route(routeWarm),
		ephemeral: route(routeEphemeral),
		model:     []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(labels...))},
		modelAdd:  []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(labels...))},
	}
}

// The global meter forwards to the provider the command installs and does not
// validate at creation, so these errors are always nil.
var (
	meter          = otel.Meter(scope)
	tokensTotal, _ = meter.Int64Counter("embed_stack.tokens",
		metric.WithDescription("Tokens embedded (wrapping and <|endoftext|> included), by route and model; counted when the request succeeds."))
	requestInputs, _ = meter.Int64Histogram("embed_stack.request.inputs",
		metric.WithDescription("Inputs per embedding request."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048))
	requestTokens, _ = meter.Int64Histogram("embed_stack.request.tokens",
		metric.WithDescription("Tokens per embedding request, all inputs together."),
		metric.WithExplicitBucketBoundaries(16, 64, 256, 1024, 4096, 8192, 16384, 32768, 65536, 131072, 300000))
	batchRequests, _ = meter.Int64Histogram("embed_stack.batch.requests",
		metric.WithDescription("Requests whose warm calls share one batched worker call (cross-request batching)."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64))
	inflight, _ = meter.Int64UpDownCounter("embed_stack.backend.inflight",
		metric.WithDescription("Calls to workers in progress, by route and model: for a warm worker, which decodes one call at a time, the calls queued behind it plus the one it runs."))
)

// startWrap begins the stage routing.wrap.
func startWrap(ctx context.Context, tr trace.Tracer, typ InputType) stage.Stage {
	_, st := stage.Start(ctx, tr, "routing.wrap")
	if st.Recording() {
		st.SetAttributes(attribute.String("embed_stack.input_type", typ.String()))
	}
	return st
}

// endTokenize ends the stage routing.tokenize.
func endTokenize(st stage.Stage, inputs, tokens int, err error) {
	if err == nil && st.Recording() {
		st.SetAttributes(attribute.Int("embed_stack.inputs", inputs), attribute.Int("embed_stack.tokens", tokens))
	}
	st.End(err)
}

// routeCounts is how a request's sequences were split between the routes.
type routeCounts struct {
	warmInputs, warmTokens           int
	ephemeralInputs, ephemeralTokens int
	// cached says the cache was consulted; cachedInputs and cachedTokens are what
	// it answered (run), which no worker saw.
	cached                     bool
	cachedInputs, cachedTokens int
}

// countRoutes splits seqs as Embed routes them.
func (r *Router) countRoutes(seqs [][]int32) routeCounts {
	var c routeCounts
	for _, s := range seqs {
		if len(s) <= r.Config.warmMaxTokens() {
			c.warmInputs++
			c.warmTokens += len(s)
		} else {
			c.ephemeralInputs++
			c.ephemeralTokens += len(s)
		}
	}
	return c
}

// endRoute ends the stage routing.route with the decision as attributes.
func (r *Router) endRoute(st stage.Stage, seqs [][]int32) routeCounts {
	c := r.countRoutes(seqs)
	if st.Recording() {
		st.SetAttributes(
			attribute.Int("embed_stack.route.warm_inputs", c.warmInputs),
			attribute.Int("embed_stack.route.warm_tokens", c.warmTokens),
			attribute.Int("embed_stack.route.ephemeral_inputs", c.ephemeralInputs),
			attribute.Int("embed_stack.route.ephemeral_tokens", c.ephemeralTokens),
			attribute.Int("embed_stack.route.warm_max_tokens", r.Config.warmMaxTokens()))
	}
	st.End(nil)
	return c
}

// withModel marks ctx as work for the router's model (stage.WithModel), so that
// every stage of the request, the backends' included, carries its model label.
// The server has usually marked it already.
func (r *Router) withModel(ctx context.Context) context.Context {
	if r.Config.Model == "" || stage.Model(ctx) == r.Config.Model {
		return ctx
	}
	return stage.WithModel(ctx, r.Config.Model)
}

// recordSuccess counts a request that was answered: its tokens by route, its
// inputs and its size, on the metrics and on the routing.embed span.
func (r *Router) recordSuccess(ctx context.Context, st stage.Stage, c routeCounts, dims int) {
	if c.warmTokens > 0 {
		tokensTotal.Add(ctx, int64(c.warmTokens), r.metrics.warm...)
	}
	if c.ephemeralTokens > 0 {
		tokensTotal.Add(ctx, int64(c.ephemeralTokens), r.metrics.ephemeral...)
	}
	inputs, tokens := c.warmInputs+c.ephemeralInputs+c.cachedInputs, c.warmTokens+c.ephemeralTokens+c.cachedTokens
	requestInputs.Record(ctx, int64(inputs), r.metrics.model...)
	requestTokens.Record(ctx, int64(tokens), r.metrics.model...)
	if st.Recording() {
		st.SetAttributes(
			attribute.Int("embed_stack.inputs", inputs),
			attribute.Int("embed_stack.tokens", tokens),
			attribute.Int("embed_stack.dimensions", dims))
		if c.cached {
			st.SetAttributes(attribute.Int("embed_stack.cached_tokens", c.cachedTokens))
		}
	}
}

// startQueue begins the stage routing.queue: a warm call waiting in the batcher
// for calls of other requests to share a worker call with, and for the worker.
func startQueue(ctx context.Context, sequences, tokens int) stage.Stage {
	_, st := stage.Start(ctx, tracer, "routing.queue")
	if st.Recording() {
		st.SetAttributes(attribute.Int("embed_stack.batch.sequences", sequences), attribute.Int("embed_stack.batch.tokens", tokens))
	}
	return st
}

// startBatch begins the stage routing.batch, one worker call carrying the calls of
// several requests, and ends their routing.queue stages. The batch's span is a
// child of the first caller's (ctx) and links to every caller's queue span, each of
// which links back to it: every request's trace leads to the batch its inputs were
// decoded in, though only the first one's holds it.
func startBatch(ctx context.Context, bt *batch, opts []metric.RecordOption) (context.Context, stage.Stage) {
	sequences := 0
	for _, c := range bt.calls {
		sequences += len(c.seqs)
	}
	batchRequests.Record(ctx, int64(len(bt.calls)), opts...)
	var links []trace.Link
	if trace.SpanFromContext(ctx).IsRecording() {
		links = make([]trace.Link, 0, len(bt.calls))
		for _, c := range bt.calls {
			links = append(links, trace.Link{SpanContext: c.queued.Span().SpanContext()})
		}
	}
	ctx, st := stage.Start(ctx, tracer, "routing.batch", trace.WithLinks(links...))
	if st.Recording() {
		st.SetAttributes(
			attribute.Int("embed_stack.batch.requests", len(bt.calls)),
			attribute.Int("embed_stack.batch.sequences", sequences),
			attribute.Int("embed_stack.batch.tokens", bt.tokens))
	}
	back := trace.Link{SpanContext: st.Span().SpanContext()}
	for _, c := range bt.calls {
		if c.queued.Recording() {
			c.queued.Span().AddLink(back)
			c.queued.SetAttributes(attribute.Int("embed_stack.batch.requests", len(bt.calls)))
		}
		c.queued.End(nil)
	}
	return ctx, st
}

// callWarm sends one batch to the warm worker: the stage routing.warm.
func (r *Router) callWarm(ctx context.Context, batch [][]int32) (_ [][]float32, err error) {
	tokens := 0
	for _, s := range batch {
		tokens += len(s)
	}
	ctx, st := stage.Start(ctx, tracer, "routing.warm")
	defer func() { st.End(err) }()
	if st.Recording() {
		st.SetAttributes(
			attribute.Int("embed_stack.batch.sequences", len(batch)),
			attribute.Int("embed_stack.batch.tokens", tokens))
	}
	inflight.Add(ctx, 1, r.metrics.warm...)
	defer inflight.Add(ctx, -1, r.metrics.warm...)
	return r.warm.Embed(ctx, batch)
}

// callLong embeds one long sequence on an ephemeral worker once admission lets it
// start (the stage routing.admit: the wait for a slot, or the refusal). Its further
// stage spans (spawn, call, stop) come from the backend, which knows the process.
func (r *Router) callLong(ctx context.Context, seq []int32) ([]float32, error) {
	_, adm := stage.Start(ctx, tracer, "routing.admit")
	if adm.Recording() {
		adm.SetAttributes(attribute.Int("embed_stack.batch.tokens", len(seq)))
	}
	release, err := r.admit.acquire(ctx, len(seq))
	adm.End(err)
	if err != nil {
		return nil, err
	}
	// The slot is held until Long.Embed has returned, by when the worker is gone.
	defer release()
	inflight.Add(ctx, 1, r.metrics.ephemeral...)
	defer inflight.Add(ctx, -1, r.metrics.ephemeral...)
	return r.Long.Embed(ctx, seq)
}

package server

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// scope is the instrumentation scope of the server's spans and metrics.
const scope = "github.com/embed-stack/embed-stack/server"

var tracer = otel.Tracer(scope)

// The global meter forwards to the provider the command installs and does not
// validate at creation, so these errors are always nil.
var (
	meter            = otel.Meter(scope)
	requestsTotal, _ = meter.Int64Counter("embed_stack.http.requests",
		metric.WithDescription("HTTP requests answered, by route, status code and model (none before the request's model is known)."))
	requestDuration, _ = meter.Float64Histogram("embed_stack.http.request.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time from the first middleware to the last byte handed to the connection, by route, status code and model."),
		metric.WithExplicitBucketBoundaries(stage.Buckets...))
	errorsTotal, _ = meter.Int64Counter("embed_stack.http.errors",
		metric.WithDescription("Requests answered with an error, by route, status code, model and the error envelope's code (error_code, \"none\" when null)."))
)

// Label names. The HTTP status is "code", as promhttp and most Prometheus
// exporters name it; the error envelope's code is "error_code", so that the two
// never share a name. The model label is stage.ModelKey, the same on every
// package's series; a request has one once its model is resolved (useModel).
const (
	labelRoute     = "route"
	labelCode      = "code"
	labelErrorCode = "error_code"
)

// routeLabel is the route pattern of a request, or "unmatched" for a URL that
// matches none (not the raw path: unknown URLs must not grow the label set). The
// request log uses it too, so that a log line and its series agree.
func routeLabel(c *gin.Context) string {
	if r := c.FullPath(); r != "" {
		return r
	}
	return "unmatched"
}

// probeRoutes are polled by orchestrators and scrapers every few seconds. They get
// no span, and their log lines are DEBUG (requestLogLevel): either would bury the
// requests. Their metrics are still counted.
var probeRoutes = map[string]bool{"/health": true, "/ready": true, "/metrics": true}

// traceRequests is the outermost middleware. With Config.Tracing it is otelgin's
// server span, the parent of every stage span of a request (and, through the worker
// protocol, of the worker's), reading the caller's W3C traceparent; otelgin's own
// HTTP metrics are off, since the request metrics below are the documented ones.
//
// Without Config.Tracing no span is made: otelgin would still compute its
// attributes and copy the request for a span nobody records. A caller's trace
// context is still carried, so that the log line and the workers see its trace id;
// a request without a traceparent costs one header lookup.
func (s *Server) traceRequests() gin.HandlerFunc {
	if s.Config.Tracing {
		return otelgin.Middleware("",
			otelgin.WithGinFilter(func(c *gin.Context) bool { return !probeRoutes[c.FullPath()] }),
			otelgin.WithMeterProvider(metricnoop.NewMeterProvider()))
	}
	return func(c *gin.Context) {
		if c.Request.Header.Get("traceparent") == "" {
			return
		}
		ctx := otel.GetTextMapPropagator().Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
		c.Request = c.Request.WithContext(ctx)
	}
}

// requestAttrs caches the attribute set of each route, status and model: building
// one sorts and allocates, and the triples are few (the routes times the statuses
// written times the served models: the model label is a served model's id, never
// a name from the request).
var requestAttrs struct {
	sync.RWMutex // guards m
	m            map[routeStatus]requestOpts
}

// requestOpts are the options of one route and status, as slices so that passing
// them allocates nothing.
type requestOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

type routeStatus struct {
	route  string
	status int
	model  string
}

func requestAttrsFor(route string, status int, model string) requestOpts {
	key := routeStatus{route, status, model}
	requestAttrs.RLock()
	o, ok := requestAttrs.m[key]
	requestAttrs.RUnlock()
	if ok {
		return o
	}
	attrs := []attribute.KeyValue{attribute.String(labelRoute, route), attribute.String(labelCode, strconv.Itoa(status))}
	if model != "" {
		attrs = append(attrs, stage.ModelKey.String(model))
	}
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	o = requestOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
	requestAttrs.Lock()
	if requestAttrs.m == nil {
		requestAttrs.m = make(map[routeStatus]requestOpts)
	}
	requestAttrs.m[key] = o
	requestAttrs.Unlock()
	return o
}

// useModel records that the request is for m, once the handler has resolved it:
// m's id becomes the model label of the request's metrics and log line, and of the
// stages started under the context it returns. A request refused before (a body
// that is not JSON, an unknown model) has no model label: its model name is
// whatever the client sent, which must not grow the label set.
func useModel(c *gin.Context, m *Model) context.Context {
	c.Set(ctxModel, m) // a pointer: a string would be copied to the heap
	return stage.WithModel(c.Request.Context(), m.ID)
}

// modelLabel is the id of the model useModel recorded, or "".
func modelLabel(c *gin.Context) string {
	if m, ok := c.Get(ctxModel); ok {
		return m.(*Model).ID
	}
	return ""
}

// observeRequests counts requests by route, status and model, times them, and
// puts the facts the handlers left for the log (inputs, tokens, error) on the
// request span.
func (s *Server) observeRequests() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		ctx := c.Request.Context()
		attrs := requestAttrsFor(routeLabel(c), c.Writer.Status(), modelLabel(c))
		requestsTotal.Add(ctx, 1, attrs.add...)
		requestDuration.Record(ctx, time.Since(start).Seconds(), attrs.record...)

		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return
		}
		if n, ok := c.Get(ctxInputs); ok {
			if v, ok := n.(int); ok {
				span.SetAttributes(attribute.Int("embed_stack.inputs", v))
			}
		}
		if n, ok := c.Get(ctxTokens); ok {
			if v, ok := n.(int); ok {
				span.SetAttributes(attribute.Int("embed_stack.tokens", v))
			}
		}
	}
}

// recordError counts the error a request was answered with and puts it on its
// span: the span status follows the HTTP status (otelgin marks 5xx as errors, not
// 4xx), and the attributes say what kind of error it was. The stage that decided
// the error carries its message.
func recordError(c *gin.Context, err error, status int, body openai.ErrorBody) {
	code := "none"
	if body.Error.Code != nil {
		code = *body.Error.Code
	}
	c.Set(ctxErrorCode, code)
	attrs := []attribute.KeyValue{attribute.String(labelRoute, routeLabel(c)), attribute.String(labelCode, strconv.Itoa(status)), attribute.String(labelErrorCode, code)}
	if m := modelLabel(c); m != "" {
		attrs = append(attrs, stage.ModelKey.String(m))
	}
	errorsTotal.Add(c.Request.Context(), 1, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	span := trace.SpanFromContext(c.Request.Context())
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("error.type", stage.ErrorType(err)))
	if body.Error.Code != nil {
		span.SetAttributes(attribute.String("embed_stack.error.code", *body.Error.Code))
	}
}

// decodeEmbeddingRequest reads and decodes the body of POST /v1/embeddings: the
// stage server.decode.
func (s *Server) decodeEmbeddingRequest(c *gin.Context) (req *openai.EmbeddingRequest, err error) {
	_, st := stage.Start(c.Request.Context(), tracer, "server.decode")
	defer func() { st.End(err) }()
	body, err := s.readBody(c)
	if err != nil {
		return nil, err
	}
	req, err = openai.DecodeEmbeddingRequest(body)
	if err != nil {
		return nil, err
	}
	if st.Recording() {
		kind := "text"
		if len(req.Input.Tokens) > 0 {
			kind = "token_ids"
		}
		format := req.EncodingFormat
		if format == "" {
			format = "float"
		}
		st.SetAttributes(
			attribute.Int("http.request.body.size", len(body)),
			attribute.Int("embed_stack.inputs", req.Input.Len()),
			attribute.String("embed_stack.input_kind", kind),
			attribute.String("embed_stack.encoding_format", format),
			attribute.Int("embed_stack.dimensions", req.Dimensions))
	}
	return req, nil
}

// writeEmbeddings encodes the answer and hands it to the connection: the stage
// server.encode, in ctx (the request's, marked with its model).
func writeEmbeddings(ctx context.Context, c *gin.Context, resp *openai.EmbeddingResponse) {
	_, st := stage.Start(ctx, tracer, "server.encode")
	body := resp.AppendJSON(make([]byte, 0, responseSizeHint(resp.Vectors, resp.Base64)))
	c.Data(http.StatusOK, "application/json", body)
	if st.Recording() {
		format := "float"
		if resp.Base64 {
			format = "base64"
		}
		st.SetAttributes(
			attribute.String("embed_stack.encoding_format", format),
			attribute.Int("embed_stack.vectors", len(resp.Vectors)),
			attribute.Int("http.response.body.size", len(body)))
	}
	st.End(nil)
}

// requestLogLevel is the level of a request's log line: DEBUG for probes and
// scrapes (route is the matched pattern) unless they fail with a 5xx other than
// /ready's 503, WARN for a 503 (expected while the warm worker starts or restarts),
// ERROR for other 5xx, INFO otherwise.
func requestLogLevel(route string, status int) slog.Level {
	switch {
	case status == http.StatusServiceUnavailable && route == "/ready":
		return slog.LevelDebug
	case status == http.StatusServiceUnavailable:
		return slog.LevelWarn
	case status >= 500:
		return slog.LevelError
	case probeRoutes[route]:
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// Package server is embed-stack's HTTP edge: the gin engine, its middleware, the
// handlers of the OpenAI-compatible and native endpoints, and the one place that
// maps errors to HTTP statuses (errors.go).
//
// It does not know how embeddings or rerank scores are made: it decodes requests
// with package openai, hands them to an Embedder or a Reranker (package routing)
// and encodes the answer.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
)

// Embedder runs embedding requests; *routing.Router implements it.
type Embedder interface {
	Embed(ctx context.Context, req *routing.Request) (*routing.Result, error)
	Prepare(req *routing.Request) ([][]int32, error)
}

// Config holds the HTTP-facing settings. Zero values mean the documented defaults.
type Config struct {
	// ModelName is the id served by /v1/models and the name --strict-model accepts.
	ModelName string
	// Aliases are further accepted model names.
	Aliases []string
	// ModelMeta describes the model of ModelName in GET /v1/models when Models is
	// empty.
	ModelMeta openai.ModelMeta
	// StrictModel answers 404 model_not_found for other names. Off by default because
	// clients such as LangChain send their own default name (text-embedding-ada-002).
	StrictModel bool
	// MaxBodyBytes bounds a request body; 0 = 32 MiB (2048 inputs of 8k tokens of
	// text fit well within it).
	MaxBodyBytes int64
	// Created is reported as the model's creation time; zero = server start.
	Created time.Time
	// Logger receives one line per request; nil = slog.Default().
	Logger *slog.Logger
	// Tracing wraps each request in an OpenTelemetry server span (otelgin), the
	// parent of its stage spans; set it when a tracer provider is installed (package
	// telemetry). Off, a caller's traceparent is still carried to the log line and
	// the workers, and nothing else is done per request.
	Tracing bool

	// APIKeys, when any, are the bearer tokens accepted (auth.go): every route but
	// /health, /ready and (unless MetricsAuth) /metrics answers 401 without one.
	APIKeys []string
	// MetricsAuth puts /metrics behind APIKeys as well; scrapers then send a key.
	MetricsAuth bool
	// CORSOrigins are the browser origins (patterns with *, or "*" for all) whose
	// pages may call the API (cors.go); other pages get 403. None: no CORS
	// headers and no check (serve passes LocalOrigins and --cors-origin).
	CORSOrigins []string
	// MaxConcurrentRequests bounds the work requests (/v1/embeddings, /embed,
	// /tokenize) in flight; more get 429 with Retry-After (limits.go). 0 =
	// DefaultMaxConcurrentRequests.
	MaxConcurrentRequests int
	// RequestTimeout bounds one work request; past it the request gets 504 and its
	// work is cancelled. 0 = DefaultRequestTimeout.
	RequestTimeout time.Duration
	// BodyTimeout bounds reading a work request's body, which happens before
	// admission; past it 408. 0 = DefaultBodyTimeout.
	BodyTimeout time.Duration
	// WriteStallTimeout bounds how long writing a work request's answer may make
	// no progress (per 64 KiB); past it the connection is closed. 0 =
	// DefaultWriteStallTimeout.
	WriteStallTimeout time.Duration
	// HeaderTimeout bounds reading a request's headers. 0 = DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections. 0 = DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (431). 0 = DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxConnections bounds the open connections (LimitListener). 0 =
	// DefaultMaxConnections.
	MaxConnections int
	// DebugVars serves GET /debug/vars: goroutines, heap and limiter counters, for
	// leak checks (behind APIKeys when set).
	DebugVars bool
}

// Server is the HTTP API. Set its fields, then call Handler once.
type Server struct {
	Config   Config
	Embedder Embedder
	// Reranker serves POST /v1/rerank and POST /rerank; nil answers them 404.
	Reranker Reranker
	// Models, when set, are the served models (registry.go), the first the
	// default; Config.ModelName, Config.Aliases, Embedder and Reranker are then
	// unused. Unset, the server serves the one model they describe.
	Models []Model
	// Ready reports whether the warm worker can take requests (GET /ready).
	Ready func() bool
	// Metrics, when set, is served at GET /metrics (the Prometheus registry of
	// package telemetry).
	Metrics http.Handler
	// Healthy, when set, reports whether the process can still serve (GET
	// /health): false once the warm worker cannot be restarted, so that an
	// orchestrator replaces the process.
	Healthy func() bool
	// Vars, when set, adds figures (worker restarts, ...) to GET /debug/vars.
	Vars func() map[string]any
	// Info is GET /info's description of the models and device (info.go); its
	// first model's limits also fill the bounds of GET /openapi.json.
	Info Info
	// Device, when set, describes where the vectors are computed (the warm
	// worker's device, as of when it became ready); GET /health reports it as
	// "device" when it returns non-nil. It must not block: /health is a liveness
	// probe.
	Device func() any
	// CPUVariant, when set, names the build of ggml's CPU kernels the warm worker
	// runs ("haswell", "zen4", "builtin", ...); GET /info reports it as
	// "cpu_variant" once it is known (the worker is ready). It must not block.
	CPUVariant func() string
	// Loads, when set, reports each model's worker now, by model ID, for GET
	// /api/ps; unset, every model counts as loaded.
	Loads func(id string) ModelLoad

	limits   *limiter    // built by Handler from Config.MaxConcurrentRequests
	bodies   *bodyBudget // built by Handler: MaxConcurrentRequests × MaxBodyBytes
	conns    *connLimit  // set by LimitListener
	draining atomic.Bool // set by Drain
}

// Drain tells load balancers to stop sending work here, before the server stops
// listening: from now on GET /ready answers 503 {"status":"draining"}, so a balancer's
// health check takes the replica out of rotation, and every response carries
// Connection: close, so no pooled connection to it outlives the drain (a balancer
// that sent a request on an idle connection the moment the server closed it would
// get no answer). Requests are still served normally: a balancer keeps sending until
// its health check has seen the 503. Safe for concurrent use; there is no undoing it.
func (s *Server) Drain() { s.draining.Store(true) }

// Handler returns the gin engine with every route and middleware installed.
func (s *Server) Handler() http.Handler {
	if s.Config.Logger == nil {
		s.Config.Logger = slog.Default()
	}
	if s.Config.MaxBodyBytes <= 0 {
		s.Config.MaxBodyBytes = 32 << 20
	}
	if s.Config.Created.IsZero() {
		s.Config.Created = time.Now()
	}
	if s.Config.MaxConcurrentRequests <= 0 {
		s.Config.MaxConcurrentRequests = DefaultMaxConcurrentRequests
	}
	if s.Config.RequestTimeout <= 0 {
		s.Config.RequestTimeout = DefaultRequestTimeout
	}
	s.Config.BodyTimeout = orDefault(s.Config.BodyTimeout, DefaultBodyTimeout)
	s.Config.WriteStallTimeout = orDefault(s.Config.WriteStallTimeout, DefaultWriteStallTimeout)
	s.Config.HeaderTimeout = orDefault(s.Config.HeaderTimeout, DefaultHeaderTimeout)
	s.Config.IdleTimeout = orDefault(s.Config.IdleTimeout, DefaultIdleTimeout)
	if s.Config.MaxHeaderBytes <= 0 {
		s.Config.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if s.Config.MaxConnections <= 0 {
		s.Config.MaxConnections = DefaultMaxConnections
	}
	s.limits = newLimiter(s.Config.MaxConcurrentRequests)
	s.bodies = &bodyBudget{limit: int64(s.Config.MaxConcurrentRequests) * s.Config.MaxBodyBytes}
	r := gin.New()
	r.Use(s.traceRequests(), s.observeRequests(), s.recovery(), s.logRequests(), s.closeWhenDraining())
	if cors := s.cors(); cors != nil {
		r.Use(cors) // before the key check: a preflight carries no credentials
	}
	if auth := s.authenticate(); auth != nil {
		r.Use(auth)
	}
	r.NoRoute(func(c *gin.Context) {
		writeError(c, &statusError{status: http.StatusNotFound, code: "not_found",
			msg: "Unknown request URL: " + c.Request.Method + " " + c.Request.URL.Path + "."})
	})
	// A known URL with the wrong method (GET /v1/embeddings) is 405 with Allow
	// (gin sets it from the routes), not a 404 that says the URL does not exist.
	r.HandleMethodNotAllowed = true
	r.NoMethod(func(c *gin.Context) {
		writeError(c, &statusError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
			msg: c.Request.Method + " is not allowed on " + c.Request.URL.Path + "; use " + c.Writer.Header().Get("Allow") + "."})
	})

	// The body is read before admission (body.go): a slow sender holds no slot.
	r.POST("/v1/embeddings", s.readRequestBody(), s.admit(), s.embeddings)
	// Without /v1 as well: llama.cpp's server and Infinity serve it there, and
	// LiteLLM's infinity/ provider posts there.
	r.POST("/embeddings", s.readRequestBody(), s.admit(), s.embeddings)
	r.GET("/v1/models", s.listModels)
	r.GET("/v1/models/:model", s.getModel)
	r.POST("/embed", s.readRequestBody(), s.admit(), s.embed) // TEI's shape or the native one (tei.go)
	r.POST("/", s.readRequestBody(), s.admit(), s.teiRoot)    // TEI serves embed (or rerank) at its root too
	// Ollama's root answers GET and HEAD with these words: its CLI's heartbeat
	// (HEAD /, before `ollama list` and `ollama ps`) and UIs that check the
	// server is up send them. Open without a key, as /health is.
	r.Match([]string{http.MethodGet, http.MethodHead}, "/", func(c *gin.Context) {
		c.String(http.StatusOK, "Ollama is running")
	})
	r.POST("/embed_all", s.teiEmbedAll) // refused in TEI's shape (tei.go)
	// Ollama's embedding API (ollama.go), and the probes its clients send.
	r.POST("/api/embed", s.readRequestBody(), s.admit(), s.ollamaEmbed)
	r.POST("/api/embeddings", s.readRequestBody(), s.admit(), s.ollamaEmbeddings)
	r.Match([]string{http.MethodGet, http.MethodHead}, "/api/tags", s.ollamaTags)
	r.Match([]string{http.MethodGet, http.MethodHead}, "/api/version", s.ollamaVersion)
	r.POST("/api/show", s.readRequestBody(), s.ollamaShow)
	r.GET("/api/ps", s.ollamaPS)
	r.POST("/tokenize", s.readRequestBody(), s.admit(), s.tokenize)
	r.POST("/v1/rerank", s.readRequestBody(), s.admit(), s.rerank)
	r.POST("/v2/rerank", s.readRequestBody(), s.admit(), s.rerank) // Cohere's v2 client; the same shape
	r.POST("/rerank", s.readRequestBody(), s.admit(), s.teiRerank)
	s.describeRoutes(r)
	if s.Config.DebugVars {
		r.GET("/debug/vars", s.debugVars)
	}
	if s.Metrics != nil {
		r.GET("/metrics", gin.WrapH(s.Metrics))
	}
	// HEAD as well as GET: load balancers probe with either.
	r.Match([]string{http.MethodGet, http.MethodHead}, "/health", s.health)
	r.Match([]string{http.MethodGet, http.MethodHead}, "/ready", func(c *gin.Context) {
		if s.draining.Load() {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "draining"})
			return
		}
		if s.Ready != nil && !s.Ready() {
			c.Header("Retry-After", "1")
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "loading"})
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready"})
	})
	return r
}

// health serves GET /health: 200 while the process serves, 503 once Healthy says
// it cannot recover by itself (the warm worker failed to restart too often).
func (s *Server) health(c *gin.Context) {
	if s.Healthy != nil && !s.Healthy() {
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unhealthy", "reason": "the warm worker failed to restart repeatedly; see the log"})
		return
	}
	body := gin.H{"status": "ok"}
	if s.Device != nil {
		if d := s.Device(); d != nil {
			body["device"] = d
		}
	}
	c.JSON(http.StatusOK, body)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// headerRequestID names a request in the answer and the log: OpenAI's SDKs read
// it into their errors (request_id) for support.
const headerRequestID = "X-Request-Id"

// requestID is the id of a request: the caller's X-Request-Id where it is a
// plausible one (1 to 128 letters, digits, '.', '_', ':' or '-'; a proxy's), so
// that one id follows the request through, else a new "req_" and 24 hex digits.
func requestID(sent string) string {
	ok := len(sent) > 0 && len(sent) <= 128
	for i := 0; ok && i < len(sent); i++ {
		c := sent[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if ok {
		return sent
	}
	return "req_" + newID()[:24]
}

// Headers for clients that cannot add body fields (LangChain JS).
const (
	headerInputType   = "X-Embedding-Input-Type"
	headerInstruction = "X-Embedding-Instruction"
)

// closeWhenDraining asks net/http to close each connection after its response once
// Drain was called (see Drain).
func (s *Server) closeWhenDraining() gin.HandlerFunc {
	return func(c *gin.Context) {
		if s.draining.Load() {
			c.Header("Connection", "close")
		}
		c.Next()
	}
}

// recovery turns a panic into a 500 in OpenAI's envelope instead of gin's empty body.
func (s *Server) recovery() gin.HandlerFunc {
	return gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, err any) {
		s.Config.Logger.Error("panic serving request", "path", c.Request.URL.Path, "panic", err)
		writeError(c, &statusError{status: http.StatusInternalServerError, msg: "The server had an error while processing your request."})
	})
}

// logRequests writes one line per request, with its X-Request-Id (requestID),
// which the answer carries too. It never logs input text.
func (s *Server) logRequests() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		id := requestID(c.GetHeader(headerRequestID))
		c.Header(headerRequestID, id)
		c.Next()
		attrs := []any{
			"request_id", id,
			"method", c.Request.Method,
			"path", c.Request.URL.Path,
			"route", routeLabel(c),
			"status", c.Writer.Status(),
			"duration_ms", float64(time.Since(start).Microseconds()) / 1000,
		}
		if n, ok := c.Get(ctxInputs); ok {
			attrs = append(attrs, "inputs", n)
		}
		if n, ok := c.Get(ctxTokens); ok {
			attrs = append(attrs, "tokens", n)
		}
		if e, ok := c.Get(ctxError); ok {
			attrs = append(attrs, "error", e)
		}
		if e, ok := c.Get(ctxErrorCode); ok {
			attrs = append(attrs, "error_code", e)
		}
		if m := modelLabel(c); m != "" {
			attrs = append(attrs, "model", m)
		}
		level := requestLogLevel(c.FullPath(), c.Writer.Status())
		s.Config.Logger.Log(c.Request.Context(), level, "request", attrs...)
	}
}

// Keys under which handlers leave facts for the request log.
const (
	ctxInputs    = "inputs"
	ctxTokens    = "tokens"
	ctxError     = "error"
	ctxErrorCode = "error_code"
	ctxModel     = "model"   // the request's *Model, once resolved (useModel)
	ctxDialect   = "dialect" // the request's dialect, when its handler decides it (errors.go)
)

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/server"
	"github.com/embed-stack/embed-stack/telemetry"
)

// serveFlags is the parsed command line of `embed-stack serve`.
type serveFlags struct {
	// models are the --model values; entries is them parsed with --model-name and
	// --model-alias (parseModelEntries).
	models           flagconfig.StringList
	entries          []modelEntry
	keepAlive        flagconfig.StringList
	addr             string
	modelName        string
	aliases          flagconfig.StringList
	strictModel      bool
	defaultInputType string
	defaultInstr     string
	tokenIDs         string
	maxInputs        int
	maxTotalTokens   int
	maxInputTokens   int
	warmMaxTokens    int
	maxBodyBytes     int64
	threads          int
	batchTokens      int
	readyTimeout     time.Duration
	shutdownGrace    time.Duration
	drainDelay       time.Duration
	logFormat        string
	logLevel         string
	configPath       string
	printConfig      bool
	// cacheSizeMiB bounds the exact embedding cache (routing.Cache); 0 = off.
	cacheSizeMiB int64
	// allowPoolingMismatch serves a GGUF whose declared pooling is not last-token.
	allowPoolingMismatch bool
	// task is --task: auto, embed or rerank (see modelinfo.Read).
	task string
	// warm is --warm-backend, --mlx-server and --mlx-model; parseServeFlags resolves
	// it (see backends.WarmProgram.Resolve).
	warm backends.WarmProgram
	// metrics serves GET /metrics.
	metrics bool
	// Robustness and security (guard.go, docs/reliability.md).
	apiKeys           flagconfig.StringList
	apiKeyFile        string
	metricsAuth       bool
	maxConcurrent     int
	requestTimeout    time.Duration
	maxHeaderBytes    int
	workerHangTimeout time.Duration
	bodyTimeout       time.Duration
	writeStall        time.Duration
	headerTimeout     time.Duration
	maxConnections    int
	debugVars         bool
	// Routing of long inputs and batching (admission.go, docs/routing.md).
	warmBuckets        string
	buckets            []int // warmBuckets parsed, capped at warmMaxTokens
	batchWindow        time.Duration
	batchMaxTokens     int
	maxEphemeral       int
	maxEphemeralTokens int
	ephemeralQueue     int
	ephemeralNice      int
	// device is --device, --gpu-layers and --backend-dir (device.go).
	device backends.DeviceArgs
}

// newServeFlagSet defines serve's flags, bound to f. It is the single source of the
// flags, their environment variables, config-file keys and docs/configuration.md.
func newServeFlagSet(f *serveFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("embed-stack serve", flag.ContinueOnError)
	fs.Var(&f.models, "model", "model (required): a local GGUF `path`, or a Hugging Face reference owner/name[:QUANT][@REV] or owner/name/FILE.gguf (e.g. Qwen/Qwen3-Embedding-0.6B-GGUF), downloaded once into the Hugging Face cache (HF_HOME, HF_HUB_CACHE, HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE apply). Repeat it to serve several models, each as NAME=MODEL (NAME is what requests give as \"model\"; without NAME= the GGUF's general.name as a slug), each with its own warm worker; the first embedding model is the default of requests without a model, the first reranker that of /v1/rerank, and with several models an unknown name gets 404 model_not_found")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "`host:port` to listen on (loopback by default; use 0.0.0.0:8080 to expose it)")
	fs.StringVar(&f.modelName, "model-name", "", "model id served by /v1/models and accepted by --strict-model (default: the GGUF's general.name as a slug, e.g. qwen3-embedding-0.6b); with several --model, name each as NAME=MODEL instead")
	fs.Var(&f.aliases, "model-alias", "further accepted model `name` (repeatable); with several --model, MODEL=ALIAS, MODEL being a --model NAME")
	fs.Var(&f.keepAlive, "keep-alive", "stop a model's warm worker after this `duration` without requests, freeing its memory; the next request starts it again and waits for it (a cold start, bounded by --request-timeout), and /ready counts a stopped model as ready (default 0 = never stop; as Ollama's keep_alive). MODEL=DURATION sets one model's (MODEL being a --model NAME or --model-name), over a DURATION for all (repeatable)")
	fs.BoolVar(&f.strictModel, "strict-model", false, "answer 404 model_not_found for model names other than --model-name and its aliases (by default any name is accepted and echoed back, since clients such as LangChain send their own default)")
	fs.StringVar(&f.defaultInputType, "default-input-type", "document", "input type when a request names none: `query` or document")
	fs.StringVar(&f.defaultInstr, "default-instruction", routing.DefaultInstruction, "query `task` used when a request gives no instruction")
	fs.StringVar(&f.tokenIDs, "token-ids", "cl100k", "how token-id inputs are read: `cl100k` (decode as tiktoken cl100k_base, LangChain Python's default, then re-tokenize), native (Qwen3 ids) or reject")
	fs.IntVar(&f.maxInputs, "max-inputs", 2048, "most inputs per request")
	fs.IntVar(&f.maxTotalTokens, "max-total-tokens", 300000, "most tokens per request, all inputs together, after wrapping")
	fs.IntVar(&f.maxInputTokens, "max-input-tokens", 32768, "most tokens per input after wrapping, EOS included (longer inputs get 400)")
	fs.IntVar(&f.warmMaxTokens, "warm-max-tokens", 8192, "longest input (tokens) the warm worker takes; longer inputs each get an ephemeral worker sized to them")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", 32<<20, "largest request body in `bytes` (larger ones get 413)")
	fs.Int64Var(&f.cacheSizeMiB, "cache-size", 0, "memory in `MiB` for an exact cache of the vectors of inputs seen before (the same model file and token ids give the same vector bit for bit), least recently used first out; 0 = no cache")
	fs.IntVar(&f.threads, "threads", 0, "llama.cpp decode threads per worker (0 = number of CPUs)")
	fs.IntVar(&f.batchTokens, "batch-tokens", 0, "tokens per llama.cpp decode call in the warm worker (0 = the worker's default)")
	fs.DurationVar(&f.readyTimeout, "worker-ready-timeout", 2*time.Minute, "how long a worker may load without progress before it counts as hung")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, SIGINT or SIGHUP, how long requests in flight may finish")
	fs.DurationVar(&f.drainDelay, "drain-delay", 0, "on SIGTERM, SIGINT or SIGHUP, how long to keep serving with GET /ready answering 503 before the listener closes, so that load balancers' health checks take the replica out first: at least their check interval times their failure count (deploy/haproxy/README.md; 0 = close at once, right for a server without a balancer)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.configPath, flagconfig.ConfigFlag, "", "TOML, YAML or JSON `file` of settings named like these flags (max_inputs = 100); precedence: flag > EMBED_STACK_* env > file > default")
	fs.StringVar(&f.task, "task", modelinfo.TaskAuto, "what the model does: `auto` (a reranker when the GGUF declares llama.cpp's rank pooling or has a classifier head cls.output.weight, as llama.cpp's conversion of Qwen3-Reranker writes it; else an embedding model), embed, or rerank (a Qwen3-Reranker whose GGUF keeps the whole LM head: the rows of the tokens yes and no are used). A reranker serves POST /v1/rerank and POST /rerank; an embedding model serves /v1/embeddings, /embed and /tokenize")
	fs.BoolVar(&f.allowPoolingMismatch, "allow-pooling-mismatch", false, "serve a GGUF whose declared pooling type is not last-token (3) anyway; its vectors are still last-token pooled, which is right only for a model trained that way")
	fs.StringVar(&f.warm.Name, "warm-backend", backends.WarmLlama, "program of the warm worker: `llama` (embed-stack worker, llama.cpp on the GGUF) or mlx (mlx-embed-server, MLX on Apple Silicon, reading --mlx-model); inputs longer than --warm-max-tokens always go to llama.cpp")
	fs.StringVar(&f.warm.MLXServer, "mlx-server", "", "mlx-embed-server executable `path` for --warm-backend mlx (default: mlx-embed-server next to the embed-stack executable, on darwin/arm64 only; given explicitly, any platform)")
	fs.StringVar(&f.warm.MLXModel, "mlx-model", "", "Hugging Face snapshot `directory` (config.json, *.safetensors) the MLX warm worker loads; the same checkpoint --model is the GGUF of")
	fs.BoolVar(&f.metrics, "metrics", true, "serve Prometheus metrics at GET /metrics (tracing is configured by the standard OTEL_* environment variables; see docs/observability.md)")
	fs.Var(&f.apiKeys, "api-key", "accept this API `key` (Authorization: Bearer KEY), required on every route but /health, /ready and /metrics once any key is set (repeatable; prefer --api-key-file or the environment: a command line is visible to other local users)")
	fs.StringVar(&f.apiKeyFile, "api-key-file", "", "`file` of accepted API keys, one per line (# comments), in addition to --api-key")
	fs.BoolVar(&f.metricsAuth, "metrics-auth", false, "require an API key on /metrics too (by default scrapers need none)")
	fs.IntVar(&f.maxConcurrent, "max-concurrent-requests", 64, "most requests in flight on the work routes (POST /v1/embeddings, /v1/rerank, /v2/rerank, /rerank, /embed, / and /tokenize, Ollama's /api/embed and /api/embeddings); more get 429 with Retry-After")
	fs.DurationVar(&f.requestTimeout, "request-timeout", 10*time.Minute, "longest a request may take, waiting for a worker included; past it 504 and its work is cancelled")
	fs.IntVar(&f.maxHeaderBytes, "max-header-bytes", server.DefaultMaxHeaderBytes, "largest request header block in `bytes` (larger ones get 431)")
	fs.DurationVar(&f.headerTimeout, "header-timeout", server.DefaultHeaderTimeout, "longest a client may take to send a request's headers; past it the connection is closed")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest a client may take to send a request body, which is read before admission (a slow sender holds no --max-concurrent-requests slot); past it 408")
	fs.DurationVar(&f.writeStall, "write-stall-timeout", server.DefaultWriteStallTimeout, "longest writing an answer may make no progress (per 64 KiB); past it the connection is closed and the request's slot freed")
	fs.IntVar(&f.maxConnections, "max-connections", server.DefaultMaxConnections, "most open client connections, idle keep-alive ones included; more are answered 503 with Retry-After and closed")
	fs.DurationVar(&f.workerHangTimeout, "worker-hang-timeout", 5*time.Minute, "a warm worker with requests outstanding that answers none for this long is killed and restarted, and an ephemeral worker that answers no health probe for this long is killed (0 = never)")
	fs.StringVar(&f.warmBuckets, "warm-buckets", "256,1024,8192", "comma-separated input `lengths` (tokens) the warm worker is warmed with before it reports ready, so that the first request of each size is as fast as the hundredth (lengths above --warm-max-tokens are capped to it)")
	fs.DurationVar(&f.batchWindow, "batch-window", 2*time.Millisecond, "how long a request's short inputs wait for other requests' to share a warm worker call with; a lone request on an idle server goes at once (0 = no cross-request batching)")
	fs.IntVar(&f.batchMaxTokens, "batch-max-tokens", 2048, "token budget of one batched warm worker call")
	fs.IntVar(&f.maxEphemeral, "max-ephemeral", 0, "most ephemeral workers (one per input longer than --warm-max-tokens) running at once (0 = from memory and CPUs: see docs/routing.md)")
	fs.IntVar(&f.maxEphemeralTokens, "max-ephemeral-tokens", 0, "most tokens the running ephemeral workers hold together, which bounds their KV cache memory (0 = what half the available memory holds, at the model's KV bytes per token, but at most what --max-ephemeral workers hold at --max-input-tokens each)")
	fs.IntVar(&f.ephemeralQueue, "ephemeral-queue", 8, "long inputs that may wait for an ephemeral worker; beyond that a request gets 429 with Retry-After")
	fs.IntVar(&f.ephemeralNice, "ephemeral-nice", 10, "lower the CPU priority of ephemeral workers' decoding by `n` (0-19), so the warm worker's short requests go first on shared cores: with 0 a short query beside a long input took 3.5 times as long (p50), with 10 1.3 times (docs/routing.md); a lone long input runs as fast either way")
	f.device.AddFlags(fs)
	fs.BoolVar(&f.debugVars, "debug-vars", false, "serve GET /debug/vars: goroutines, heap, requests in flight and refused, worker restarts (behind the API key when one is set)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration (secrets redacted) with each setting's source, and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: embed-stack serve --model PATH [flags]\n\n"+
			"Serves POST /v1/embeddings (OpenAI-compatible), GET /v1/models, POST /embed,\n"+
			"POST /tokenize, GET /health and GET /ready; for a reranker model (--task),\n"+
			"POST /v1/rerank (Cohere/Jina shape) and POST /rerank (TEI shape) instead.\n\n"+
			"Every flag can also be set by an environment variable (--max-inputs: EMBED_STACK_MAX_INPUTS;\n"+
			"repeatable flags comma-separated) or in the --config file.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func parseServeFlags(args []string, stdout, stderr io.Writer) (*serveFlags, error) {
	f := &serveFlags{}
	fs := newServeFlagSet(f)
	fs.SetOutput(stderr)
	sources, err := flagconfig.Configure(fs, args, os.Getenv)
	if err != nil {
		return nil, err
	}
	if f.printConfig {
		flagconfig.Print(stdout, fs, sources)
		if len(f.models) == 0 {
			fmt.Fprintln(stderr, printConfigNoModel)
		}
		return f, nil
	}
	if len(f.models) == 0 {
		return nil, errors.New(modelRequired)
	}
	if f.entries, err = parseModelEntries(f.models, f.aliases, f.modelName); err != nil {
		return nil, err
	}
	if err := parseKeepAlive(f.keepAlive, f.entries); err != nil {
		return nil, err
	}
	if err := atLeastOne(intFlag{"--max-inputs", f.maxInputs}, intFlag{"--max-total-tokens", f.maxTotalTokens}); err != nil {
		return nil, err
	}
	if err := checkTokenLimits(f.warmMaxTokens, f.maxInputTokens); err != nil {
		return nil, err
	}
	if f.threads < 0 || f.batchTokens < 0 {
		return nil, errors.New("--threads and --batch-tokens must not be negative")
	}
	if _, err := modelinfo.ParseTask(f.task); err != nil {
		return nil, err
	}
	if err := checkRoutingFlags(f); err != nil {
		return nil, err
	}
	if err := checkDevice(f.device); err != nil {
		return nil, err
	}
	if err := checkGuardFlags(f); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	if f.warm, err = f.warm.Resolve(runtime.GOOS+"/"+runtime.GOARCH, exe); err != nil {
		return nil, err
	}
	if f.warm.Name == backends.WarmMLX && len(f.entries) > 1 {
		return nil, errors.New("--warm-backend mlx serves one model (--mlx-model); serve several models with --warm-backend llama, or run one server per model")
	}
	return f, nil
}

// serveCommand is `embed-stack serve`.
type serveCommand struct {
	f      *serveFlags
	logger *slog.Logger
	// forced is closed by Close: a second signal ends the graceful stop at once.
	forced    chan struct{}
	closeOnce sync.Once
}

func newServe(args []string, stdout, stderr io.Writer) (command, int) {
	f, err := parseServeFlags(args, stdout, stderr)
	if err != nil {
		return nil, refused(stderr, "serve", err)
	}
	if f.printConfig {
		return nil, 0
	}
	logger, err := telemetry.NewLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return nil, refused(stderr, "serve", err)
	}
	slog.SetDefault(logger)
	return &serveCommand{f: f, logger: logger, forced: make(chan struct{})}, 0
}

// printConfigNoModel is what --print-config adds on stderr when no --model is set,
// since the configuration it printed is one that serve refuses.
const printConfigNoModel = "embed-stack serve: warning: no model is set (--model, EMBED_STACK_MODEL or model in the --config file); serve would refuse to start with this configuration"

// Run loads the models, answers HTTP at once (GET /ready and requests get 503
// while the warm workers load) and serves until ctx ends, then drains.
func (c *serveCommand) Run(ctx context.Context) error {
	if err := c.serve(ctx); err != nil {
		c.logger.Error("embed-stack serve failed", "error", err)
		c.logger.Info("exit", "status", 1)
		return exitStatus(1)
	}
	c.logger.Info("exit", "status", 0)
	return nil
}

// Close ends a graceful stop at once: the connections are closed (cancelling
// their requests, and so killing their ephemeral workers) and the warm workers
// are killed rather than drained.
func (c *serveCommand) Close() error {
	c.closeOnce.Do(func() { close(c.forced) })
	return nil
}

func (c *serveCommand) serve(ctx context.Context) error {
	f, logger := c.f, c.logger
	tel, err := startTelemetry("serve", f.metrics, logger)
	if err != nil {
		return err
	}
	defer tel.Stop()
	apiKeys, err := server.LoadAPIKeys(f.apiKeys, f.apiKeyFile, logger)
	if err != nil {
		return err
	}
	limits, err := f.routingConfig()
	if err != nil {
		return err
	}
	start := time.Now()
	models, err := loadModels(ctx, f, limits, logger)
	if err != nil {
		return err
	}
	api := c.newAPI(models, apiKeys)
	if err := wireTelemetry(tel, api, models); err != nil {
		return err
	}

	// Loading left garbage several times the size of what it kept (the GGUF's 300k
	// vocabulary and merge strings, read to build the tokenizer's flat tables); give
	// it back to the OS now rather than when the background scavenger gets to it, so
	// that an idle server's RSS is what it uses.
	debug.FreeOSMemory()

	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("listen on %s (--addr): %w", f.addr, err)
	}
	ln = api.LimitListener(ln)
	for _, m := range models.list {
		logger.Info("listening", "addr", ln.Addr().String(), "model", m.name, "aliases", m.entry.aliases, "dim", m.eng.facts.Dim, "rerank", m.eng.facts.Rerank)
	}
	r := &running{api: api, srv: api.HTTPServer(), fleet: &models.fleet, warmErr: make(chan error, 1), serveErr: make(chan error, 1)}
	// The warm workers start under their own context, so that a shutdown can
	// abandon a start still in progress.
	var warmCtx context.Context
	warmCtx, r.abandonStart = context.WithCancel(ctx)
	defer r.abandonStart()
	go func() { r.warmErr <- startFleet(warmCtx, r.fleet, f.warmMaxTokens) }()
	go func() { r.serveErr <- r.srv.Serve(ln) }()
	runErr := c.wait(ctx, r, start)
	return c.shutdown(ctx, r, runErr)
}

// routingConfig is the routing configuration every model shares: serve's limits,
// batching and defaults; each model's own bounds are filled in by loadModels.
func (f *serveFlags) routingConfig() (routing.Config, error) {
	defaultType, err := routing.ParseInputType(f.defaultInputType)
	if err != nil {
		return routing.Config{}, fmt.Errorf("--default-input-type: %w", err)
	}
	idMode, err := routing.ParseTokenIDMode(f.tokenIDs)
	if err != nil {
		return routing.Config{}, fmt.Errorf("--token-ids: %w", err)
	}
	return routing.Config{
		MaxInputs:          f.maxInputs,
		MaxTotalTokens:     f.maxTotalTokens,
		MaxInputTokens:     f.maxInputTokens,
		WarmMaxTokens:      f.warmMaxTokens,
		BatchWindow:        f.batchWindow,
		BatchMaxTokens:     f.batchMaxTokens,
		EphemeralQueue:     ephemeralQueue(f.ephemeralQueue),
		DefaultInputType:   defaultType,
		DefaultInstruction: f.defaultInstr,
		TokenIDs:           idMode,
	}, nil
}

// newAPI is the HTTP side over the models; the first is the default.
func (c *serveCommand) newAPI(models *servedModels, apiKeys []string) *server.Server {
	f, first := c.f, models.list[0]
	gin.SetMode(gin.ReleaseMode)
	return &server.Server{
		Config: server.Config{
			ModelName:    first.name,
			Aliases:      first.entry.aliases,
			StrictModel:  f.strictModel,
			MaxBodyBytes: f.maxBodyBytes,
			Logger:       c.logger,

			APIKeys:               apiKeys,
			MetricsAuth:           f.metricsAuth,
			MaxConcurrentRequests: f.maxConcurrent,
			RequestTimeout:        f.requestTimeout,
			BodyTimeout:           f.bodyTimeout,
			WriteStallTimeout:     f.writeStall,
			HeaderTimeout:         f.headerTimeout,
			MaxHeaderBytes:        f.maxHeaderBytes,
			MaxConnections:        f.maxConnections,
			DebugVars:             f.debugVars,
		},
		Models:  models.registry(),
		Ready:   models.fleet.Ready,
		Healthy: models.fleet.Healthy,
		Info:    server.Info{Device: deviceName(first.eng.device), Models: models.info()},
		Device: func() any {
			if d := first.warm.Info().Device; d != nil {
				return d
			}
			return nil
		},
		CPUVariant: func() string {
			if d := first.warm.Info().Device; d != nil {
				return d.CPUVariant
			}
			return ""
		},
		Vars: models.fleet.Vars,
	}
}

// running is what serve has started: the HTTP server and the warm workers.
type running struct {
	api      *server.Server
	srv      *http.Server
	fleet    *backends.Fleet
	serveErr chan error // the HTTP server's end
	warmErr  chan error // the warm workers' start's result
	// warmDone says warmErr has been received; abandonStart ends a start still
	// in progress.
	warmDone     bool
	abandonStart context.CancelFunc
}

// wait returns when ctx ends, or with the error that ended serving: the HTTP
// server's, or a warm worker's that failed to start.
func (c *serveCommand) wait(ctx context.Context, r *running, start time.Time) error {
	select {
	case <-ctx.Done():
	case err := <-r.serveErr:
		return fmt.Errorf("http server: %w", err)
	case err := <-r.warmErr:
		r.warmDone = true
		if err != nil {
			return err
		}
		c.logger.Info("warm worker ready", "duration", time.Since(start).Round(time.Millisecond))
		select {
		case <-ctx.Done():
		case err := <-r.serveErr:
			return fmt.Errorf("http server: %w", err)
		}
	}
	c.logger.Info("shutting down", "grace", c.f.shutdownGrace, "signal", stoppedBy(ctx))
	return nil
}

// shutdown stops what serve started and returns runErr, or the second signal's
// cut. Cleanup must run even though ctx is done; Close (a second signal) cuts it
// short.
func (c *serveCommand) shutdown(ctx context.Context, r *running, runErr error) error {
	logger := c.logger
	cleanup, force := context.WithCancel(context.WithoutCancel(ctx))
	defer force()
	go func() {
		select {
		case <-c.forced:
			logger.Warn("second signal: stopping now, abandoning the requests in flight")
			force()
		case <-cleanup.Done():
		}
	}()
	if ctx.Err() != nil {
		drain(cleanup, r.api, c.f.drainDelay, logger)
	}
	sctx, cancel := context.WithTimeout(cleanup, c.f.shutdownGrace)
	defer cancel()
	drainStart := time.Now()
	if err := r.srv.Shutdown(sctx); err != nil {
		logger.Warn("requests still in flight when the shutdown grace ended; closing their connections", "grace", c.f.shutdownGrace, "error", err)
		_ = r.srv.Close()
	} else {
		logger.Info("requests drained", "duration", time.Since(drainStart).Round(time.Millisecond))
	}
	r.abandonStart()
	if !r.warmDone {
		<-r.warmErr // Start returns promptly once its context has ended
	}
	if err := r.fleet.Close(cleanup); err != nil {
		logger.Warn("stop warm worker", "error", err)
	} else {
		logger.Info("warm worker stopped")
	}
	if cleanup.Err() != nil && runErr == nil {
		runErr = errors.New("stopped by a second signal before the shutdown finished")
	}
	return runErr
}

// startFleet starts the models' warm workers, wording a failure with the flag to
// change (warmStartError) and, with several models, the model's name.
func startFleet(ctx context.Context, fleet *backends.Fleet, warmMax int) error {
	err := fleet.Start(ctx)
	var me *backends.ModelError
	if !errors.As(err, &me) {
		return err
	}
	err = warmStartError(me.Err, warmMax)
	if len(fleet.Models) > 1 {
		err = fmt.Errorf("model %s: %w", me.Model, err)
	}
	return err
}

// drain keeps serving for delay with /ready answering 503 (server.Server.Drain), so
// that a balancer stops sending before the listener closes; a second signal (ctx)
// cuts it short. Without it a balancer learns of the stop only from refused
// connections, which it retries only if configured to.
func drain(ctx context.Context, api *server.Server, delay time.Duration, logger *slog.Logger) {
	api.Drain()
	if delay <= 0 {
		return
	}
	logger.Info("draining: /ready answers 503 until the listener closes", "delay", delay)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

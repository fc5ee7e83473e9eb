package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/server"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// serveFlags is the parsed command line of `embed-stack serve`.
type serveFlags struct {
	// models are the --model values; entries is them parsed with --model-name and
	// --model-alias (parseModelEntries).
	models           stringList
	entries          []modelEntry
	keepAlive        stringList
	addr             string
	modelName        string
	aliases          stringList
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
	// allowPoolingMismatch serves a GGUF whose declared pooling is not last-token.
	allowPoolingMismatch bool
	// task is --task: auto, embed or rerank (see modelinfo.Read).
	task string
	// warm is --warm-backend, --mlx-server and --mlx-model; parseServeFlags resolves
	// it (see warmChoice.resolve).
	warm warmChoice
	// metrics serves GET /metrics.
	metrics bool
	// Robustness and security (guard.go, docs/reliability.md).
	apiKeys           stringList
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

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

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
	fs.IntVar(&f.threads, "threads", 0, "llama.cpp decode threads per worker (0 = number of CPUs)")
	fs.IntVar(&f.batchTokens, "batch-tokens", 0, "tokens per llama.cpp decode call in the warm worker (0 = the worker's default)")
	fs.DurationVar(&f.readyTimeout, "worker-ready-timeout", 2*time.Minute, "how long a worker may load without progress before it counts as hung")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long requests in flight may finish")
	fs.DurationVar(&f.drainDelay, "drain-delay", 0, "on SIGTERM, how long to keep serving with GET /ready answering 503 before the listener closes, so that load balancers' health checks take the replica out first: at least their check interval times their failure count (deploy/haproxy/README.md; 0 = close at once, right for a server without a balancer)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.configPath, configFlag, "", "TOML, YAML or JSON `file` of settings named like these flags (max_inputs = 100); precedence: flag > EMBED_STACK_* env > file > default")
	fs.StringVar(&f.task, "task", modelinfo.TaskAuto, "what the model does: `auto` (a reranker when the GGUF declares llama.cpp's rank pooling or has a classifier head cls.output.weight, as llama.cpp's conversion of Qwen3-Reranker writes it; else an embedding model), embed, or rerank (a Qwen3-Reranker whose GGUF keeps the whole LM head: the rows of the tokens yes and no are used). A reranker serves POST /v1/rerank and POST /rerank; an embedding model serves /v1/embeddings, /embed and /tokenize")
	fs.BoolVar(&f.allowPoolingMismatch, "allow-pooling-mismatch", false, "serve a GGUF whose declared pooling type is not last-token (3) anyway; its vectors are still last-token pooled, which is right only for a model trained that way")
	fs.StringVar(&f.warm.Name, "warm-backend", warmLlama, "program of the warm worker: `llama` (embed-stack worker, llama.cpp on the GGUF) or mlx (mlx-embed-server, MLX on Apple Silicon, reading --mlx-model); inputs longer than --warm-max-tokens always go to llama.cpp")
	fs.StringVar(&f.warm.MLXServer, "mlx-server", "", "mlx-embed-server executable `path` for --warm-backend mlx (default: mlx-embed-server next to the embed-stack executable, on darwin/arm64 only; given explicitly, any platform)")
	fs.StringVar(&f.warm.MLXModel, "mlx-model", "", "Hugging Face snapshot `directory` (config.json, *.safetensors) the MLX warm worker loads; the same checkpoint --model is the GGUF of")
	fs.BoolVar(&f.metrics, "metrics", true, "serve Prometheus metrics at GET /metrics (tracing is configured by the standard OTEL_* environment variables; see docs/observability.md)")
	fs.Var(&f.apiKeys, "api-key", "accept this API `key` (Authorization: Bearer KEY), required on every route but /health, /ready and /metrics once any key is set (repeatable; prefer --api-key-file or the environment: a command line is visible to other local users)")
	fs.StringVar(&f.apiKeyFile, "api-key-file", "", "`file` of accepted API keys, one per line (# comments), in addition to --api-key")
	fs.BoolVar(&f.metricsAuth, "metrics-auth", false, "require an API key on /metrics too (by default scrapers need none)")
	fs.IntVar(&f.maxConcurrent, "max-concurrent-requests", 64, "most /v1/embeddings, /embed and /tokenize requests in flight; more get 429 with Retry-After")
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
	sources, err := configure(fs, args, os.Getenv)
	if err != nil {
		return nil, err
	}
	if f.printConfig {
		printConfig(stdout, fs, sources)
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
	if f.warm, err = f.warm.resolve(runtime.GOOS+"/"+runtime.GOARCH, exe); err != nil {
		return nil, err
	}
	if f.warm.Name == warmMLX && len(f.entries) > 1 {
		return nil, errors.New("--warm-backend mlx serves one model (--mlx-model); serve several models with --warm-backend llama, or run one server per model")
	}
	return f, nil
}

func runServe(args []string, stdout, stderr io.Writer) int {
	f, err := parseServeFlags(args, stdout, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "embed-stack serve:", err)
		return 2
	}
	if f.printConfig {
		return 0
	}
	logger, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "embed-stack serve:", err)
		return 2
	}
	slog.SetDefault(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, f, logger); err != nil {
		logger.Error("embed-stack serve failed", "error", err)
		logger.Info("exit", "status", 1)
		return 1
	}
	logger.Info("exit", "status", 0)
	return 0
}

// printConfigNoModel is what --print-config adds on stderr when no --model is set,
// since the configuration it printed is one that serve refuses.
const printConfigNoModel = "embed-stack serve: warning: no model is set (--model, EMBED_STACK_MODEL or model in the --config file); serve would refuse to start with this configuration"

func serve(ctx context.Context, f *serveFlags, logger *slog.Logger) error {
	tel, err := startTelemetry("serve", f.metrics, logger)
	if err != nil {
		return err
	}
	defer tel.stop()
	second, releaseSignals := notifySecondSignal()
	defer releaseSignals()
	apiKeys, err := loadAPIKeys(f.apiKeys, f.apiKeyFile, logger)
	if err != nil {
		return err
	}
	defaultType, err := routing.ParseInputType(f.defaultInputType)
	if err != nil {
		return fmt.Errorf("--default-input-type: %w", err)
	}
	idMode, err := routing.ParseTokenIDMode(f.tokenIDs)
	if err != nil {
		return fmt.Errorf("--token-ids: %w", err)
	}
	start := time.Now()
	models, err := loadModels(ctx, f, logger)
	if err != nil {
		return err
	}
	for _, m := range models {
		m.eng.warm.Spec = f.warm.spec(m.eng.warmArgs, m.eng.warm.Spec)
		lim := m.lim
		logger.Info("ephemeral workers", "model", m.name, "max", lim.Workers, "max_tokens", lim.Tokens, "queue", f.ephemeralQueue, "basis", lim.Basis())
		// A worker that stops answering is killed, and so restarted, by the hang
		// watch (OnDemand.HangTimeout); --keep-alive stops an idle one.
		m.warm = &backends.OnDemand{Warm: m.eng.warm, KeepAlive: m.entry.keepAlive, HangTimeout: f.workerHangTimeout,
			Logger: m.eng.warm.Logger}
		m.eng.warmInfo = m.warm.Info
		m.router = m.eng.router(routing.Config{
			Model:              m.name,
			MaxInputs:          f.maxInputs,
			MaxTotalTokens:     f.maxTotalTokens,
			MaxInputTokens:     f.maxInputTokens,
			WarmMaxTokens:      f.warmMaxTokens,
			BatchWindow:        f.batchWindow,
			BatchMaxTokens:     f.batchMaxTokens,
			MaxEphemeral:       lim.Workers,
			MaxEphemeralTokens: lim.Tokens,
			EphemeralQueue:     ephemeralQueue(f.ephemeralQueue),
			DefaultInputType:   defaultType,
			DefaultInstruction: f.defaultInstr,
			TokenIDs:           idMode,
		})
		m.router.Warm = warmBackend{m.warm}
		m.eng.long.HangTimeout = f.workerHangTimeout
		if f.workerHangTimeout == 0 {
			m.eng.long.HangTimeout = -1 // off, as for the warm worker
		}
	}
	if f.warm.Name == warmMLX {
		logger.Info("warm worker: mlx-embed-server", "path", f.warm.MLXServer, "model_dir", f.warm.MLXModel)
	}
	gin.SetMode(gin.ReleaseMode)
	api := &server.Server{
		Config: server.Config{
			ModelName:    models[0].name,
			Aliases:      models[0].entry.aliases,
			StrictModel:  f.strictModel,
			MaxBodyBytes: f.maxBodyBytes,
			Logger:       logger,

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
		Ready:   models.ready,
		Healthy: models.healthy,
		Info:    server.Info{Device: deviceName(models[0].eng.device), Models: models.info()},
		Device: func() any {
			if d := models[0].warm.Info().Device; d != nil {
				return d
			}
			return nil
		},
		Vars: models.vars,
	}
	if err := tel.wire(api, models); err != nil {
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
	srv := api.HTTPServer()
	ln = api.LimitListener(ln)
	for _, m := range models {
		logger.Info("listening", "addr", ln.Addr().String(), "model", m.name, "aliases", m.entry.aliases, "dim", m.eng.facts.Dim, "rerank", m.eng.facts.Rerank)
	}

	// The API answers at once (GET /ready says 503 and requests get 503 with
	// Retry-After) while the warm workers load.
	warmErr := make(chan error, 1)
	// Its own context, so that a shutdown can abandon a start still in progress.
	warmCtx, abandonStart := context.WithCancel(ctx)
	defer abandonStart()
	go func() { warmErr <- models.start(warmCtx, f.warmMaxTokens) }()
	warmDone := false
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "grace", f.shutdownGrace)
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	case err := <-warmErr:
		warmDone = true
		if err != nil {
			runErr = err
		} else {
			logger.Info("warm worker ready", "duration", time.Since(start).Round(time.Millisecond))
			select {
			case <-ctx.Done():
				logger.Info("shutting down", "grace", f.shutdownGrace)
			case err := <-serveErr:
				runErr = fmt.Errorf("http server: %w", err)
			}
		}
	}

	// Cleanup must run even though ctx is done; a second signal cuts it short: the
	// connections are closed (cancelling their requests, and so killing their
	// ephemeral workers) and the warm workers are killed rather than drained.
	cleanup, force := context.WithCancel(context.WithoutCancel(ctx))
	defer force()
	go func() {
		select {
		case <-second:
			logger.Warn("second signal: stopping now, abandoning the requests in flight")
			force()
		case <-cleanup.Done():
		}
	}()
	if ctx.Err() != nil {
		drain(cleanup, api, f.drainDelay, logger)
	}
	sctx, cancel := context.WithTimeout(cleanup, f.shutdownGrace)
	defer cancel()
	drainStart := time.Now()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("requests still in flight when the shutdown grace ended; closing their connections", "grace", f.shutdownGrace, "error", err)
		_ = srv.Close()
	} else {
		logger.Info("requests drained", "duration", time.Since(drainStart).Round(time.Millisecond))
	}
	abandonStart()
	if !warmDone {
		<-warmErr // Start returns promptly once its context has ended
	}
	if err := models.close(cleanup); err != nil {
		logger.Warn("stop warm worker", "error", err)
	} else {
		logger.Info("warm worker stopped")
	}
	if cleanup.Err() != nil && runErr == nil {
		runErr = errors.New("stopped by a second signal before the shutdown finished")
	}
	return runErr
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

// warmBackend adapts the warm supervisor to routing.Backend, translating its
// unavailability into routing's, so package server maps it to 503 without knowing
// about processes.
type warmBackend struct{ w warmEmbedder }

// warmEmbedder is *backends.Warm, or the *backends.HangWatch over it.
type warmEmbedder interface {
	Embed(ctx context.Context, seqs [][]int32) ([][]float32, error)
}

func (b warmBackend) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	v, err := b.w.Embed(ctx, seqs)
	return v, translate(err)
}

// longBackend adapts the ephemeral spawner to routing.SingleBackend.
type longBackend struct{ e *backends.Ephemeral }

func (b longBackend) Embed(ctx context.Context, seq []int32) ([]float32, error) {
	v, err := b.e.Embed(ctx, seq)
	return v, translate(err)
}

func translate(err error) error {
	var ue *backends.UnavailableError
	if errors.As(err, &ue) {
		return &routing.UnavailableError{RetryAfter: ue.RetryAfter, Err: err}
	}
	return err
}

// lazyCl100k loads the cl100k_base vocabulary on first use: it costs memory and
// start-up time that servers which never see token-id inputs should not pay.
type lazyCl100k struct {
	once sync.Once
	dec  *tokenizer.Cl100k
	err  error
}

func (l *lazyCl100k) Decode(ids []int64) (string, error) {
	l.once.Do(func() { l.dec, l.err = tokenizer.NewCl100k() })
	if l.err != nil {
		return "", fmt.Errorf("load cl100k_base: %w", l.err)
	}
	return l.dec.Decode(ids)
}

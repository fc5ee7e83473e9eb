package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/modelrun"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/served"
	"github.com/embed-stack/embed-stack/server"
	"github.com/embed-stack/embed-stack/telemetry"
)

// serveFlags is the parsed command line of `embed-stack serve`.
type serveFlags struct {
	// models are the --model values; entries is them parsed with --model-name and
	// --model-alias (served.ParseEntries).
	models, aliases, keepAlive, apiKeys []string
	corsOrigins                         []string
	entries                             []served.Entry
	addr, modelName, apiKeyFile         string
	defaultInputType, defaultInstr      string
	tokenIDs, warmBuckets, configPath   string
	strictModel, printConfig            bool
	metrics, metricsAuth, debugVars     bool
	maxInputs, maxTotalTokens           int
	maxBodyBytes                        int64
	// cacheSizeMiB bounds the exact embedding cache (routing.Cache); 0 = off.
	cacheSizeMiB              int64
	shutdownGrace, drainDelay time.Duration
	// Robustness and security (docs/reliability.md).
	maxConcurrent, maxHeaderBytes, maxConnections  int
	requestTimeout, workerHangTimeout, bodyTimeout time.Duration
	writeStall, headerTimeout                      time.Duration
	// Batching and long inputs (docs/routing.md).
	batchWindow                    time.Duration
	batchMaxTokens, ephemeralQueue int
	// pooling, prompts, queryPrompt and documentPrompt are the per-model
	// --pooling, --prompts, --query-prompt and --document-prompt values
	// (served.ParseSettings puts them on the entries).
	pooling, prompts, queryPrompt, documentPrompt []string
	// weights is the per-model --weights (served.ParseWeights).
	weights []string
	// warm is --warm-backend, --mlx-server and --mlx-model; parseServeFlags resolves
	// it (see backends.WarmProgram.Resolve).
	warm backends.WarmProgram
	// run is every model's configuration but its Model (the workers' flags,
	// --task, --ephemeral-nice, and WarmBuckets from --warm-buckets); served.Load
	// completes it per model.
	run modelrun.Config
}

// newServeFlagSet defines serve's flags, bound to f, in --help's order. It is the
// single source of the flags, their environment variables, config-file keys and
// docs/configuration.md.
func newServeFlagSet(f *serveFlags) *flagconfig.Set {
	s := flagconfig.New("embed-stack serve", "embed-stack serve --model MODEL [flags]",
		"Serves embeddings: POST /v1/embeddings (OpenAI's API), /api/embed (Ollama's) and /embed\n"+
			"(TEI's); for a reranker, POST /v1/rerank. GET /docs describes every route.")
	s.Env = true
	s.Footer = "docs/configuration.md details every setting."
	e := &f.run
	s.Group("Essentials")
	s.List(&f.models, "model", "MODEL", "GGUF file or Hugging Face reference, e.g. Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0 (required); repeat as NAME=MODEL to serve several").
		More("A reference is owner/name[:QUANT][@REV] or owner/name/FILE.gguf, downloaded into the Hugging Face cache (HF_HOME, HF_HUB_CACHE, HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE apply; `embed-stack pull` downloads ahead of time). Each model gets its own warm worker and is named NAME, what requests give as \"model\" (without NAME=, the GGUF's general.name as a slug); the first embedding model answers requests without a model, the first reranker those of /v1/rerank, and with several models an unknown name gets 404 model_not_found.").
		Also("model-path", "gguf")
	s.String(&f.addr, "addr", "HOST:PORT", "127.0.0.1:8080", "address to listen on; 0.0.0.0:8080 listens on every interface").
		More("The default, loopback, is reachable from this machine only.").
		Also("port", "host", "listen", "bind")
	s.List(&f.apiKeys, "api-key", "KEY", "require this key (Authorization: Bearer KEY) on all routes but /health, /ready and /metrics; repeatable").
		More("A command line is visible to other local users: prefer --api-key-file or EMBED_STACK_API_KEY.")
	s.String(&f.apiKeyFile, "api-key-file", "FILE", "", "file of further keys, one per line (# starts a comment)").
		More("In addition to --api-key.")
	s.List(&f.corsOrigins, "cors-origin", "ORIGIN", "let web pages of ORIGIN (https://app.example.com; * matches any run of characters, * alone every origin) call the API from a browser; repeatable").
		More("Pages served from this machine (localhost, 127.0.0.1, [::1], any port), desktop apps' and browser extensions' schemes are allowed already, as Ollama allows them: browser UIs and extensions written for Ollama or OpenAI's JS SDK work against a local server. A page of any other origin gets 403, so that a web site cannot use a server it was not given; requests without an Origin header (every non-browser client) are not concerned.").
		Also("cors", "origins", "allowed-origins")
	s.String(&f.configPath, flagconfig.ConfigFlag, "FILE", "", "settings file: TOML, YAML or JSON, a key per flag (max_inputs = 100)").
		More("Precedence: flag > EMBED_STACK_* environment variable > file > default. The file may hold `embed-stack embed`'s settings too; serve ignores those.")
	s.Bool(&f.printConfig, "print-config", false, "print the effective settings and their sources as a --config file, and exit").
		More("Secrets are redacted.")

	s.Group("Models and their names")
	s.String(&f.modelName, "model-name", "NAME", "", "the name requests give a single --model (default: the GGUF's general.name, e.g. qwen3-embedding-0.6b); same as --model NAME=MODEL").
		More("Also the id /v1/models lists. With several --model, name each as NAME=MODEL instead.")
	s.List(&f.aliases, "model-alias", "[MODEL=]ALIAS", "a further name for the model; with several, MODEL=ALIAS names which by its NAME; repeatable")
	s.Bool(&f.strictModel, "strict-model", false, "answer 404 to a name that is neither the model's nor an alias").
		More("By default a single model accepts any name and echoes it back, since clients such as LangChain send their own default; with several models an unknown name always gets 404.")
	s.List(&f.keepAlive, "keep-alive", "[MODEL=]DURATION", "unload a model idle this long (Ollama's keep_alive, not HTTP's); the next request reloads it; 0 = never; MODEL=DURATION for one model").
		More("The request that finds its model unloaded waits for it (a cold start, bounded by --request-timeout); /ready counts an unloaded model as ready, and GET /api/ps (`embed-stack ps`) lists the models loaded. MODEL=DURATION sets one model's (MODEL being a --model NAME or --model-name), over a DURATION for all.")
	s.String(&e.Task, "task", "TASK", modelinfo.TaskAuto, "what the model does: auto (from the GGUF), embed or rerank").
		More("auto: a reranker when the GGUF declares llama.cpp's rank pooling or has a classifier head (cls.output.weight, or jina-bert-v2's one-row cls.weight), as llama.cpp's conversion of Qwen3-Reranker or of a cross-encoder (bert: bge-reranker, ms-marco MiniLM; neo-bert; jina-bert-v2: jina-reranker-v1) writes it, else an embedding model; rerank: a Qwen3-Reranker whose GGUF keeps the whole LM head (the rows of the tokens yes and no are used). A reranker serves POST /v1/rerank and POST /rerank; an embedding model serves /v1/embeddings, /embed and /tokenize.")

	s.Group("Pooling and prompts, per model")
	s.List(&f.pooling, "pooling", "[MODEL=]MODE", poolingHelp).More(poolingMore + " MODEL=MODE sets one model's (MODEL being a --model NAME or --model-name), over a MODE for all.")
	s.List(&f.prompts, "prompts", "[MODEL=]NAME", promptsHelp()).More(promptsMore + " MODEL=NAME sets one model's.")
	s.List(&f.queryPrompt, "query-prompt", "[MODEL=]TEXT", queryPromptHelp).More("The instruction is the request's, or --default-instruction. " + queryPromptMore + " MODEL=TEXT sets one model's; a TEXT whose part before = names no model is a prompt for all.")
	s.List(&f.documentPrompt, "document-prompt", "[MODEL=]TEXT", documentPromptHelp).More("MODEL=TEXT sets one model's.")

	s.Group("Requests")
	s.String(&f.defaultInputType, "default-input-type", "TYPE", "document", "input_type of requests that give none: document, or query (embedded with the instruction)")
	s.String(&f.defaultInstr, "default-instruction", "TEXT", "", "instruction of queries whose request gives none, for every model whose query prompt takes one").
		More("Default: each model's convention's: Qwen3's \"" + routing.DefaultInstruction + "\", nomic's search_query, ...")
	s.String(&f.tokenIDs, "token-ids", "MODE", "cl100k", "inputs of token ids are read as cl100k (what LangChain sends; decoded and tokenized again), native (the model's ids) or reject").
		More("cl100k is tiktoken's cl100k_base, LangChain Python's default.")

	s.Group("Limits of one request")
	s.Int(&f.maxInputs, "max-inputs", "N", 2048, "most inputs in one request").AtLeast(1)
	defineMaxInput(s, e)
	s.Int(&f.maxTotalTokens, "max-total-tokens", "N", 300000, "most tokens in one request, all its inputs together").AtLeast(1)
	s.Int64(&f.maxBodyBytes, "max-body-bytes", "BYTES", 32<<20, "largest request body (larger: 413)")

	s.Group("Cache")
	s.Int64(&f.cacheSizeMiB, "cache-size", "MiB", 0, "memory for an exact cache of the vectors of inputs seen before; 0 = no cache").
		More("The same model file and token ids give the same vector bit for bit; least recently used first out. One cache serves every model, keyed on each GGUF's sha256.")

	s.Group("Workers (llama.cpp)")
	defineWorkerFlags(s, e)
	s.List(&f.weights, "weights", "[MODEL=]MODE", weightsHelp).More(weightsMore + " MODEL=MODE sets one model's.")
	s.String(&f.warmBuckets, "warm-buckets", "N,N,...", "256,1024,8192", "input lengths the warm worker runs once before it is ready, so that the first request of each size is fast").
		More("As fast as the hundredth. Lengths above --warm-max-tokens are capped to it.")
	s.Duration(&e.WarmReleaseKV, "warm-release-kv", "DURATION", 30*time.Second, "after this long without work the warm worker hands the KV cache of its inputs over 512 tokens back to the OS (0 = never)").AtLeast(0).
		More("940 MB for Qwen3-Embedding-0.6B at 8192 tokens; its cache for shorter inputs (a sixteenth of that) stays. The next long input takes the pages back, 3 to 4 % slower (docs/performance.md).")
	s.Duration(&f.workerHangTimeout, "worker-hang-timeout", "DURATION", 5*time.Minute, "restart a warm worker that answers none of its requests for this long (0 = never)").AtLeast(0).
		More("A warm worker with requests outstanding that answers none is killed and restarted. An ephemeral worker that answers no health probe for this long is killed too.")
	s.String(&f.warm.Name, "warm-backend", "PROGRAM", backends.WarmLlama, "program of the warm worker: llama, or mlx (mlx-embed-server on Apple Silicon)").
		More("mlx reads --mlx-model. Inputs longer than --warm-max-tokens always go to llama.cpp.")
	s.String(&f.warm.MLXServer, "mlx-server", "PATH", "", "mlx-embed-server executable (default: the one beside embed-stack on darwin/arm64)")
	s.String(&f.warm.MLXModel, "mlx-model", "DIR", "", "Hugging Face snapshot of the --model checkpoint, for --warm-backend mlx")

	s.Group("Batching across requests")
	s.Duration(&f.batchWindow, "batch-window", "DURATION", 2*time.Millisecond, "how long short inputs wait for other requests' to share a warm worker call (0 = never)").AtLeast(0).
		More("A lone request on an idle server goes at once.")
	s.Int(&f.batchMaxTokens, "batch-max-tokens", "N", 2048, "most tokens in one shared call of the warm worker").AtLeast(1)

	s.Group("Long inputs (ephemeral workers)")
	defineEphemeralFlags(s, e)
	s.Int(&f.ephemeralQueue, "ephemeral-queue", "N", 8, "long inputs that may wait for an ephemeral worker; beyond: 429").AtLeast(0).
		More("The 429 carries Retry-After; 0 lets none wait.")
	s.Int(&e.EphemeralNice, "ephemeral-nice", "N", 10, "lower the ephemeral workers' CPU priority by N (0-19), so that short requests go first").AtLeast(0).AtMost(19).
		More("Every thread of the worker, its model load included. With 0 a short query beside a long input took 2.3 to 2.9 times as long (p50), with 10 1.2 times (Zen 5, 2 vCPUs, docs/routing.md); a lone long input runs as fast either way.")

	s.Group("HTTP server")
	s.Int(&f.maxConcurrent, "max-concurrent-requests", "N", 64, "most requests in flight on the work routes, POST /v1/embeddings, /v1/rerank, /v2/rerank, /rerank, /embed, / and /tokenize, Ollama's /api/embed and /api/embeddings; more get 429").AtLeast(1).
		More("The 429 carries Retry-After.")
	s.Duration(&f.requestTimeout, "request-timeout", "DURATION", 10*time.Minute, "longest a request may take, waiting for a worker included (then 504)").AtLeast(1).
		More("Its work is cancelled.")
	s.Int(&f.maxConnections, "max-connections", "N", server.DefaultMaxConnections, "most open connections, idle HTTP keep-alive ones included; more get 503").AtLeast(1).
		More("The 503 carries Retry-After, and the connection is closed.")
	s.Duration(&f.headerTimeout, "header-timeout", "DURATION", server.DefaultHeaderTimeout, "longest a client may take to send a request's headers").AtLeast(1).
		More("Past it the connection is closed.")
	s.Duration(&f.bodyTimeout, "body-timeout", "DURATION", server.DefaultBodyTimeout, "longest a client may take to send a request body (then 408)").AtLeast(1).
		More("A slow sender holds no --max-concurrent-requests slot.")
	s.Duration(&f.writeStall, "write-stall-timeout", "DURATION", server.DefaultWriteStallTimeout, "longest writing an answer may stall (per 64 KiB) before the connection is closed").AtLeast(1).
		More("The request's slot is freed.")
	s.Int(&f.maxHeaderBytes, "max-header-bytes", "BYTES", server.DefaultMaxHeaderBytes, "largest request header block (larger: 431)").AtLeast(1024)
	s.Duration(&f.shutdownGrace, "shutdown-grace", "DURATION", 30*time.Second, "on SIGTERM, SIGINT or SIGHUP, how long requests in flight may take to finish")
	s.Duration(&f.drainDelay, "drain-delay", "DURATION", 0, "on SIGTERM, SIGINT or SIGHUP, how long to serve on with /ready answering 503, for load balancers to notice").
		More("Then the listener closes. At least the balancer's check interval times its failure count (deploy/haproxy/README.md); 0 is right for a server without a balancer.")

	s.Group("Observability")
	defineLogFlags(s, &e.LogFormat, &e.LogLevel)
	s.Bool(&f.metrics, "metrics", true, "serve Prometheus metrics at GET /metrics").
		More("Tracing is configured by the standard OTEL_* environment variables (docs/observability.md).")
	s.Bool(&f.metricsAuth, "metrics-auth", false, "require an API key on /metrics too").More("By default scrapers need none.")
	s.Bool(&f.debugVars, "debug-vars", false, "serve GET /debug/vars: goroutines, heap, requests, worker restarts").
		More("Requests in flight and refused; behind the API key when one is set.")
	return s
}

func parseServeFlags(args []string, stdout, stderr io.Writer) (*serveFlags, error) {
	f := &serveFlags{}
	s := newServeFlagSet(f)
	s.Shared, s.Stderr = newEmbedFlagSet(&embedFlags{}).Names(), stderr
	if err := s.Parse(args, os.Getenv); err != nil {
		return nil, err
	}
	if f.printConfig {
		s.Print(stdout)
		if len(f.models) == 0 {
			fmt.Fprintln(stderr, printConfigNoModel)
		}
		return f, nil
	}
	if len(f.models) == 0 {
		return nil, errors.New(modelRequired)
	}
	var err error
	if f.entries, err = served.ParseEntries(f.models, f.aliases, f.modelName); err != nil {
		return nil, err
	}
	if err := served.ParseKeepAlive(f.keepAlive, f.entries); err != nil {
		return nil, err
	}
	if err := served.ParseSettings(f.entries, f.pooling, f.prompts, f.queryPrompt, f.documentPrompt); err != nil {
		return nil, err
	}
	if err := served.ParseWeights(f.weights, f.entries); err != nil {
		return nil, err
	}
	noteSources(s, &f.run)
	if err := checkModelConfig(&f.run); err != nil {
		return nil, err
	}
	if _, err := modelinfo.ParseTask(f.run.Task); err != nil {
		return nil, err
	}
	if f.run.WarmBuckets, err = warmBuckets(f.warmBuckets, f.run.WarmMaxTokens); err != nil {
		return nil, err
	}
	for i, k := range f.apiKeys {
		if err := server.CheckAPIKey(k); err != nil {
			return nil, fmt.Errorf("--api-key #%d: %w", i+1, err)
		}
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
	stderr io.Writer
	// forced is closed by Close: a second signal ends the graceful stop at once.
	forced    chan struct{}
	closeOnce sync.Once
}

func newServe(args []string, stdout, stderr io.Writer) (command, int) {
	f, err := parseServeFlags(args, stdout, stderr)
	if err != nil {
		return nil, flagconfig.Report(err, "embed-stack serve", stdout, stderr)
	}
	if f.printConfig {
		return nil, 0
	}
	logger, err := telemetry.NewLogger(stderr, f.run.LogFormat, f.run.LogLevel)
	if err != nil {
		return nil, flagconfig.Report(err, "embed-stack serve", stdout, stderr)
	}
	slog.SetDefault(logger)
	return &serveCommand{f: f, logger: logger, stderr: stderr, forced: make(chan struct{})}, 0
}

// printConfigNoModel is what --print-config adds on stderr when no --model is set,
// since the configuration it printed is one that serve refuses.
const printConfigNoModel = "embed-stack serve: warning: no model is set (--model, EMBED_STACK_MODEL or model in the --config file); serve would refuse to start with this configuration"

// Run loads the models, answers HTTP at once (GET /ready and requests get 503
// while the warm workers load) and serves until ctx ends, then drains.
func (c *serveCommand) Run(ctx context.Context) error {
	if err := c.serve(ctx); err != nil {
		reportFailure(c.logger, c.stderr, c.f.run.LogFormat, "embed-stack serve", err)
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
	models, err := served.Load(ctx, served.Config{
		Entries: f.entries, Model: modelConfig(f.run, logger), Routing: limits, CacheBytes: f.cacheSizeMiB << 20,
		HangTimeout: f.workerHangTimeout, Warm: f.warm, EphemeralQueue: f.ephemeralQueue,
	}, logger)
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
	for _, m := range models.List {
		logger.Info("listening", "addr", ln.Addr().String(), "model", m.Name, "aliases", m.Entry.Aliases, "dim", m.Run.Facts.Dim, "rerank", m.Run.Facts.Rerank)
	}
	life := &server.Lifecycle{
		API: api, Logger: logger, Started: start,
		Start:         models.Start,
		Close:         models.Close,
		ShutdownGrace: f.shutdownGrace, DrainDelay: f.drainDelay,
		Forced: c.forced, Cause: stoppedBy,
		// Requests grow the heap again to about twice the tokenizer's tables; give
		// that back once the server is idle (a few MB of private memory).
		IdleRelease: idleRelease,
	}
	return life.Serve(ctx, ln)
}

// idleRelease is how often serve checks for an idle spell to return the Go heap's
// free memory in (server.Lifecycle.IdleRelease): it does so 2 to 4 s after the last
// request.
const idleRelease = 2 * time.Second

// routingConfig is the routing configuration every model shares: serve's limits,
// batching and defaults; each model's own bounds are filled in by served.Load.
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
		MaxInputTokens:     f.run.MaxInputTokens,
		WarmMaxTokens:      f.run.WarmMaxTokens,
		BatchWindow:        f.batchWindow,
		BatchMaxTokens:     f.batchMaxTokens,
		EphemeralQueue:     ephemeralQueue(f.ephemeralQueue),
		DefaultInputType:   defaultType,
		DefaultInstruction: f.defaultInstr,
		TokenIDs:           idMode,
	}, nil
}

// newAPI is the HTTP side over the models; the first is the default.
func (c *serveCommand) newAPI(models *served.Models, apiKeys []string) *server.Server {
	f, first := c.f, models.List[0]
	gin.SetMode(gin.ReleaseMode)
	return &server.Server{
		Config: server.Config{
			ModelName:    first.Name,
			Aliases:      first.Entry.Aliases,
			StrictModel:  f.strictModel,
			MaxBodyBytes: f.maxBodyBytes,
			Logger:       c.logger,

			APIKeys:               apiKeys,
			MetricsAuth:           f.metricsAuth,
			CORSOrigins:           append(slices.Clip(server.LocalOrigins), f.corsOrigins...),
			MaxConcurrentRequests: f.maxConcurrent,
			RequestTimeout:        f.requestTimeout,
			BodyTimeout:           f.bodyTimeout,
			WriteStallTimeout:     f.writeStall,
			HeaderTimeout:         f.headerTimeout,
			MaxHeaderBytes:        f.maxHeaderBytes,
			MaxConnections:        f.maxConnections,
			DebugVars:             f.debugVars,
		},
		Models:  models.Registry(),
		Ready:   models.Fleet.Ready,
		Healthy: models.Fleet.Healthy,
		Info:    server.Info{Device: backends.DeviceName(first.Run.Device), Models: models.Info()},
		Device: func() any {
			if d := first.Warm.Info().Device; d != nil {
				return d
			}
			return nil
		},
		CPUVariant: func() string {
			if d := first.Warm.Info().Device; d != nil {
				return d.CPUVariant
			}
			return ""
		},
		Vars:  models.Fleet.Vars,
		Loads: models.Loaded,
	}
}

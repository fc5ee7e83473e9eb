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
	"os/signal"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/hub"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/server"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// serveFlags is the parsed command line of `embed-stack serve`.
type serveFlags struct {
	model            string
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
	logFormat        string
	logLevel         string
	configPath       string
	printConfig      bool
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// newServeFlagSet defines serve's flags, bound to f. It is the single source of the
// flags, their environment variables, config-file keys and docs/configuration.md.
func newServeFlagSet(f *serveFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("embed-stack serve", flag.ContinueOnError)
	fs.StringVar(&f.model, "model", "", "model (required): a local GGUF `path`, or a Hugging Face reference owner/name[:QUANT][@REV] or owner/name/FILE.gguf (e.g. Qwen/Qwen3-Embedding-0.6B-GGUF), downloaded once into the Hugging Face cache (HF_HOME, HF_HUB_CACHE, HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE apply)")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "`host:port` to listen on (loopback by default; use 0.0.0.0:8080 to expose it)")
	fs.StringVar(&f.modelName, "model-name", "", "model id served by /v1/models and accepted by --strict-model (default: the GGUF's general.name as a slug, e.g. qwen3-embedding-0.6b)")
	fs.Var(&f.aliases, "model-alias", "further accepted model `name` (repeatable)")
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
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.configPath, configFlag, "", "TOML, YAML or JSON `file` of settings named like these flags (max_inputs = 100); precedence: flag > EMBED_STACK_* env > file > default")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration (secrets redacted) with each setting's source, and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: embed-stack serve --model PATH [flags]\n\n"+
			"Serves POST /v1/embeddings (OpenAI-compatible), GET /v1/models, POST /embed,\n"+
			"POST /tokenize, GET /health and GET /ready.\n\n"+
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
		return f, nil
	}
	if f.model == "" {
		return nil, errors.New("--model is required: the path of a Qwen3-Embedding GGUF file")
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"--max-inputs", f.maxInputs}, {"--max-total-tokens", f.maxTotalTokens}, {"--max-input-tokens", f.maxInputTokens}, {"--warm-max-tokens", f.warmMaxTokens}} {
		if c.v < 1 {
			return nil, fmt.Errorf("%s must be at least 1; got %d", c.name, c.v)
		}
	}
	if f.warmMaxTokens > f.maxInputTokens {
		return nil, fmt.Errorf("--warm-max-tokens (%d) is larger than --max-input-tokens (%d); lower it", f.warmMaxTokens, f.maxInputTokens)
	}
	if f.threads < 0 || f.batchTokens < 0 {
		return nil, errors.New("--threads and --batch-tokens must not be negative")
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
		return 1
	}
	return 0
}

// modelFacts are what serve needs to know about the GGUF without loading weights.
type modelFacts struct {
	name         string
	dim          int
	trainContext int
}

func readModelFacts(path string) (*modelFacts, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open model %s: %w", path, err)
	}
	defer f.Close()
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	dim, err := f.Uint32(arch + ".embedding_length")
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	facts := &modelFacts{dim: int(dim)}
	if n, err := f.Uint32(arch + ".context_length"); err == nil {
		facts.trainContext = int(n)
	}
	if pooling, err := f.Uint32(arch + ".pooling_type"); err == nil && pooling != 3 {
		// Last-token pooling is what Qwen3-Embedding was trained with and what the
		// engine computes; another pooling type means another kind of model.
		return nil, fmt.Errorf("model %s declares pooling type %d; embed-stack serves last-token (3) pooling models such as Qwen3-Embedding", path, pooling)
	}
	if name, err := f.String("general.name"); err == nil {
		facts.name = slug(name)
	}
	return facts, nil
}

var slugRe = regexp.MustCompile(`[^a-z0-9.]+`)

// slug turns "Qwen3 Embedding 0.6B" into "qwen3-embedding-0.6b".
func slug(s string) string {
	return strings.Trim(slugRe.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

func serve(ctx context.Context, f *serveFlags, logger *slog.Logger) error {
	ho := hub.OptionsFromEnv()
	ho.Logger, ho.Progress = logger, os.Stderr
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		ho.IsTerminal = true
	}
	modelPath, err := hub.Resolve(ctx, f.model, ho)
	if err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	f.model = modelPath
	facts, err := readModelFacts(f.model)
	if err != nil {
		return err
	}
	if facts.trainContext > 0 && f.maxInputTokens > facts.trainContext {
		return fmt.Errorf("--max-input-tokens (%d) exceeds the model's training context (%d); lower it", f.maxInputTokens, facts.trainContext)
	}
	name := f.modelName
	if name == "" {
		name = facts.name
	}
	if name == "" {
		name = "qwen3-embedding"
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
	tok, err := tokenizer.FromGGUF(f.model)
	if err != nil {
		return fmt.Errorf("load tokenizer from %s: %w", f.model, err)
	}
	logger.Info("tokenizer loaded", "vocab", tok.VocabSize(), "duration", time.Since(start).Round(time.Millisecond))

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable to start workers: %w", err)
	}
	threads := f.threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	workerArgs := []string{"worker", "--model", f.model, "--threads", strconv.Itoa(threads),
		"--log-format", f.logFormat, "--log-level", f.logLevel}
	warmArgs := append(append([]string(nil), workerArgs...), "--ctx", strconv.Itoa(f.warmMaxTokens))
	if f.batchTokens > 0 {
		warmArgs = append(warmArgs, "--batch", strconv.Itoa(f.batchTokens))
	}
	warm := &backends.Warm{
		Spec:         backends.WorkerSpec{Path: exe, Args: warmArgs},
		ReadyTimeout: f.readyTimeout,
		Logger:       logger.With("worker", "warm"),
	}
	long := &backends.Ephemeral{
		Spec:         backends.WorkerSpec{Path: exe, Args: workerArgs},
		ReadyTimeout: f.readyTimeout,
		Logger:       logger.With("worker", "ephemeral"),
	}
	router := &routing.Router{
		Config: routing.Config{
			Dim:                facts.dim,
			MaxInputs:          f.maxInputs,
			MaxTotalTokens:     f.maxTotalTokens,
			MaxInputTokens:     f.maxInputTokens,
			WarmMaxTokens:      f.warmMaxTokens,
			DefaultInputType:   defaultType,
			DefaultInstruction: f.defaultInstr,
			TokenIDs:           idMode,
		},
		Tokenizer: tok,
		Cl100k:    &lazyCl100k{},
		Warm:      warmBackend{warm},
		Long:      longBackend{long},
	}
	gin.SetMode(gin.ReleaseMode)
	api := &server.Server{
		Config: server.Config{
			ModelName:    name,
			Aliases:      f.aliases,
			StrictModel:  f.strictModel,
			MaxBodyBytes: f.maxBodyBytes,
			Logger:       logger,
		},
		Embedder: router,
		Ready:    warm.Ready,
	}

	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("listen on %s (--addr): %w", f.addr, err)
	}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	logger.Info("listening", "addr", ln.Addr().String(), "model", name, "dim", facts.dim)

	// The API answers at once (GET /ready says 503 and requests get 503 with
	// Retry-After) while the warm worker loads.
	warmErr := make(chan error, 1)
	go func() { warmErr <- warm.Start(ctx) }()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "grace", f.shutdownGrace)
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	case err := <-warmErr:
		if err != nil {
			runErr = fmt.Errorf("warm worker: %w", err)
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

	// Cleanup must run even though ctx is done.
	cleanup := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeout(cleanup, f.shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("http shutdown", "error", err)
	}
	if err := warm.Close(cleanup); err != nil {
		logger.Warn("stop warm worker", "error", err)
	}
	return runErr
}

// warmBackend adapts the warm supervisor to routing.Backend, translating its
// unavailability into routing's, so package server maps it to 503 without knowing
// about processes.
type warmBackend struct{ w *backends.Warm }

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

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/hub"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// engineConfig is what `serve` and `embed` share: which model, and how the worker
// processes that run it are started. Both commands bind their flags to it (the
// define methods), so that the shared flags are spelt, defaulted and checked alike.
type engineConfig struct {
	// Model is a local GGUF path or a Hugging Face reference (see package hub).
	Model string
	// Task is --task: auto, embed or rerank (see modelinfo.Read); "" means auto.
	Task string
	// Pooling is --pooling: mean, cls or last; "" means the model's.
	Pooling string
	// AllowPoolingMismatch is --allow-pooling-mismatch, --pooling last's older
	// spelling (modelinfo.Options).
	AllowPoolingMismatch bool
	// Prompts names the prompt convention (--prompts; "" or auto recognizes it),
	// and QueryPrompt and DocumentPrompt, when set, replace its prompts
	// (--query-prompt, --document-prompt).
	Prompts                     string
	QueryPrompt, DocumentPrompt *string
	// Threads per worker; 0 means the worker's default for its device.
	Threads int
	// DecodeTokens is the warm worker's tokens per decode call; 0 means its default.
	DecodeTokens int
	// WarmMaxTokens is the warm worker's context: the longest input it takes.
	WarmMaxTokens int
	// WarmBuckets are the input lengths the warm worker is warmed with before it
	// reports ready (its --buckets).
	WarmBuckets []int
	// EphemeralNice lowers the CPU priority of ephemeral workers' decoding threads
	// (their --nice), so that the warm worker's short requests go first.
	EphemeralNice int
	// MaxInputTokens is the longest input at all; it must fit the model's context
	// (modelinfo.Facts.MaxTokens). WarmMaxTokens and MaxInputTokens left at their
	// defaults (MaxInputSet and WarmMaxSet false) are cut to the model's.
	MaxInputTokens          int
	MaxInputSet, WarmMaxSet bool
	// MaxEphemeral and MaxEphemeralTokens bound the ephemeral workers (0: sized to
	// the machine; see capacity).
	MaxEphemeral, MaxEphemeralTokens int
	// ReadyTimeout is a starting worker's stall timer.
	ReadyTimeout time.Duration
	// LogFormat and LogLevel are passed on to the workers so their lines match ours.
	LogFormat, LogLevel string
	// Device is where the workers compute (their --device, --gpu-layers and
	// --backend-dir).
	Device backends.DeviceArgs
}

// defineWorkerFlags defines the flags of the workers: where and how they compute.
func (c *engineConfig) defineWorkerFlags(s *flagconfig.Set) {
	c.Device.AddFlags(s)
	s.Int(&c.Threads, "threads", "N", 0, "decode threads per worker (0 = one per CPU; a few on a GPU)").AtLeast(0)
	s.Int(&c.DecodeTokens, "decode-tokens", "N", 0, "tokens per llama.cpp decode call of the warm worker, its batch size (0 = the default for the device)").AtLeast(0).Old("batch-tokens")
	s.Int(&c.WarmMaxTokens, "warm-max-tokens", "N", 8192, "inputs of up to N tokens go to the warm worker, which stays loaded; each longer one gets an ephemeral worker of its own").AtLeast(1).
		More("An ephemeral worker is sized to its input and exits when done (docs/routing.md). Left at its default, the model's input limit where that is shorter.")
	s.Duration(&c.ReadyTimeout, "worker-ready-timeout", "DURATION", 2*time.Minute, "how long a loading worker may show no progress before it counts as hung")
	s.Bool(&c.AllowPoolingMismatch, "allow-pooling-mismatch", false, "the older spelling of --pooling last").
		More("For every model without a --pooling of its own: its vectors are last-token pooled, which is right only for a model trained that way.")
}

// defineMaxInput defines --max-input-tokens.
func (c *engineConfig) defineMaxInput(s *flagconfig.Set) {
	s.Int(&c.MaxInputTokens, "max-input-tokens", "N", 32768, "longest input in tokens, prompt and special tokens included (longer: 400)").AtLeast(1).
		More("Left at its default, the model's context where that is shorter (512 for BERT); a value given above what the model takes is refused at start.")
}

// Help of the model settings serve takes per model and embed for its one model.
const (
	poolingHelp        = "how vectors are pooled from the token states: mean, cls (the first token's) or last (the last token's)"
	poolingMore        = "Default: what the GGUF declares (pooling_type), else its architecture's convention (nomic-bert: mean); a model with neither (a decoder-only chat model) is refused."
	promptsMore        = "auto recognizes the convention from the GGUF's architecture and name (docs/models.md)."
	queryPromptHelp    = "text before every query, in place of the convention's; {instruction} marks where the instruction goes"
	queryPromptMore    = "A prompt without {instruction} takes none."
	documentPromptHelp = "text before every document, in place of the convention's"
)

// promptsHelp is --prompts' help line.
func promptsHelp() string {
	return "prompt convention: auto, or one of " + family.PromptNames()
}

// defineModelSettings defines embed's --pooling, --prompts, --query-prompt and
// --document-prompt, for its one model; serve's take MODEL=VALUE too
// (parseModelSettings). A prompt given, even empty, is told from none by its
// source (parseEmbedFlags).
func (c *engineConfig) defineModelSettings(s *flagconfig.Set, query, document *string) {
	s.String(&c.Pooling, "pooling", "MODE", "", poolingHelp).More(poolingMore)
	s.String(&c.Prompts, "prompts", "NAME", "auto", promptsHelp()).More(promptsMore)
	s.String(query, "query-prompt", "TEXT", "", queryPromptHelp).More(queryPromptMore)
	s.String(document, "document-prompt", "TEXT", "", documentPromptHelp)
}

// noteSources records which input limits were set (flag, environment or file)
// rather than left at their defaults, which are cut to each model's context.
func (c *engineConfig) noteSources(s *flagconfig.Set) {
	c.MaxInputSet = s.Source("max-input-tokens") != flagconfig.FromDefault
	c.WarmMaxSet = s.Source("warm-max-tokens") != flagconfig.FromDefault
}

// defineEphemeralFlags defines the bounds of the ephemeral workers.
func (c *engineConfig) defineEphemeralFlags(s *flagconfig.Set) {
	s.Int(&c.MaxEphemeral, "max-ephemeral", "N", 0, "most ephemeral workers at once (0 = as many as memory and CPUs allow)").AtLeast(0).
		More("docs/routing.md says how the default is sized.")
	s.Int(&c.MaxEphemeralTokens, "max-ephemeral-tokens", "N", 0, "most tokens the ephemeral workers hold together, bounding their memory (0 = what half the free memory holds)").AtLeast(0).
		More("Half the available memory at the model's KV cache bytes per token, and at most what --max-ephemeral workers hold at --max-input-tokens each.")
}

// defineLogFlags defines --log-format and --log-level.
func defineLogFlags(s *flagconfig.Set, format, level *string) {
	s.String(format, "log-format", "FORMAT", "text", "log format: text or json")
	s.String(level, "log-level", "LEVEL", "info", "log level: debug, info, warn or error")
}

// check refuses what no single flag's bounds can: a warm worker's limit set above
// the longest input (one left at its default is cut to it), and a malformed
// device. noteSources comes first.
func (c *engineConfig) check() error {
	if c.WarmMaxTokens > c.MaxInputTokens && !c.WarmMaxSet {
		c.WarmMaxTokens = c.MaxInputTokens
	}
	if c.WarmMaxTokens > c.MaxInputTokens {
		return fmt.Errorf("--warm-max-tokens (%d) is larger than --max-input-tokens (%d); lower it", c.WarmMaxTokens, c.MaxInputTokens)
	}
	return checkDevice(c.Device)
}

// engine is the model side of both commands: the resolved GGUF, its facts, the
// tokenizer read from it, and the (not yet started) warm and ephemeral workers. The
// caller starts engine.warm, builds a router with engine.router, and closes warm.
type engine struct {
	modelPath string
	facts     *modelinfo.Facts
	tok       *tokenizer.Tokenizer
	// frame and prompts are the special tokens and prompts of the model's inputs
	// (modelinfo.Facts.Frame, the family's prompts with the flags' changes).
	frame   routing.Frame
	prompts routing.Prompts
	// maxInput and warmMax are the model's input limits: the flags', cut to the
	// model's context where left at their defaults (modelLimits).
	maxInput, warmMax int
	// warmArgs are the warm worker's command line, which warm.Spec runs as
	// `embed-stack worker`; another warm backend (backends.WarmProgram.Spec) takes them too.
	warmArgs backends.WorkerArgs
	warm     *backends.Warm
	long     *backends.Ephemeral
	// warmInfo, when set, describes the running warm worker in place of
	// warm.Info: serve runs copies of warm (backends.OnDemand), never warm itself.
	warmInfo func() backends.EngineInfo
	// device is where the workers will run, probed before any starts (backends.ProbeDevice);
	// nil when no GPU can be there (--device cpu, or auto with no backend folder
	// off darwin/arm64), which means the CPU.
	device *backends.Device
}

// newEngine resolves the model (downloading a Hub reference into the Hugging Face
// cache, with a progress bar when stderr is a terminal), reads its facts and its
// tokenizer, and prepares the workers. Nothing is started: serve answers HTTP while
// the warm worker loads, embed waits for it.
func newEngine(ctx context.Context, cfg engineConfig, logger *slog.Logger) (*engine, error) {
	ho := hub.OptionsFromEnv()
	ho.Logger, ho.Progress = logger, os.Stderr
	ho.IsTerminal = isTerminal(os.Stderr)
	modelPath, err := hub.Resolve(ctx, cfg.Model, ho)
	if err != nil {
		return nil, fmt.Errorf("--model: %w%s", err, withoutHubAdvice(err))
	}
	facts, err := modelinfo.Read(modelPath, modelinfo.Options{Task: cfg.Task, Pooling: cfg.Pooling, AllowPoolingMismatch: cfg.AllowPoolingMismatch, Prompts: cfg.Prompts})
	if err != nil {
		return nil, err
	}
	maxInput, warmMax, err := modelLimits(cfg, facts)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", modelPath, err)
	}
	start := time.Now()
	tok, err := tokenizer.FromGGUF(modelPath)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", modelPath, err)
	}
	frame, err := facts.Frame(tok)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", modelPath, err)
	}
	if facts.Arch.Name == "qwen3" && facts.EOS >= 0 && facts.EOS != int(routing.EOS) {
		logger.Warn("the GGUF's eos_token_id is not <|endoftext|>; sequences are closed with <|endoftext|> all the same, as Qwen3-Embedding was trained",
			"eos_token_id", facts.EOS, "used", routing.EOS)
	}
	prompts := routingPrompts(facts.Prompts, cfg.QueryPrompt, cfg.DocumentPrompt)
	logger.Info("model", "architecture", facts.Arch.Name, "pooling", facts.Pooling.String(), "pooling_from", facts.PoolingFrom,
		"dim", facts.Dim, "max_input_tokens", maxInput, "warm_max_tokens", warmMax, "tokenizer", string(tok.Kind()),
		"special_tokens", frame.Text, "prompts", prompts.Family)
	logger.Info("tokenizer loaded", "vocab", tok.VocabSize(), "duration", time.Since(start).Round(time.Millisecond))

	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable to start workers: %w", err)
	}
	var device *backends.Device
	if mayHaveGPU(cfg.Device) {
		if device, err = backends.ProbeDevice(exe, cfg.Device); err != nil {
			return nil, err
		}
		logger.Info("device", "device", device.Name, "description", device.Description, "backend", device.Backend,
			"memory_total_mib", device.MemoryTotal>>20, "memory_free_mib", device.MemoryFree>>20, "note", device.Note,
			"cpu_variant", device.CPUVariant)
	}
	// --threads only when set: a worker's default depends on its device (every
	// CPU on the CPU, a few on a GPU; see llama.Config.Threads).
	base := backends.WorkerArgs{Model: modelPath, Threads: cfg.Threads, Pooling: facts.WorkerPooling(),
		LogFormat: cfg.LogFormat, LogLevel: cfg.LogLevel, DeviceArgs: cfg.Device}
	// A reranker's workers return the two logits of yes and no per sequence.
	outputs := facts.Outputs()
	if facts.Rerank {
		base.Task = backends.TaskRerank
	}
	warmArgs, longArgs := base, base
	warmArgs.Ctx, warmArgs.Batch, warmArgs.Buckets = warmMax, cfg.DecodeTokens, capLengths(cfg.WarmBuckets, warmMax)
	longArgs.Nice = cfg.EphemeralNice
	return &engine{
		modelPath: modelPath,
		device:    device,
		facts:     facts,
		tok:       tok,
		frame:     frame,
		prompts:   prompts,
		maxInput:  maxInput,
		warmMax:   warmMax,
		warmArgs:  warmArgs,
		warm: &backends.Warm{
			Spec:         workerSpec(exe, warmArgs),
			ReadyTimeout: cfg.ReadyTimeout,
			Logger:       logger.With("worker", "warm"),
			MinTokens:    warmMax,
			NEmbd:        outputs,
		},
		long: &backends.Ephemeral{
			Spec:         workerSpec(exe, longArgs),
			ReadyTimeout: cfg.ReadyTimeout,
			Logger:       logger.With("worker", "ephemeral"),
			NEmbd:        outputs,
		},
	}, nil
}

// contextLength is the model's context as /info and /v1/models report it: its
// training context, or where the GGUF gives none, what it takes.
func (e *engine) contextLength() int {
	if e.facts.TrainContext > 0 {
		return e.facts.TrainContext
	}
	return e.facts.MaxTokens
}

// modelLimits are a model's input limits: --max-input-tokens and
// --warm-max-tokens as given, or where left at their defaults, cut to what the
// model takes (modelinfo.Facts.MaxTokens: 512 for BERT), so that the warm and
// ephemeral thresholds follow the model. A limit given above what the model takes
// is refused.
func modelLimits(cfg engineConfig, f *modelinfo.Facts) (maxInput, warmMax int, err error) {
	maxInput, warmMax = cfg.MaxInputTokens, cfg.WarmMaxTokens
	switch {
	case !cfg.MaxInputSet:
		maxInput = min(maxInput, f.MaxTokens)
	case maxInput > f.MaxTokens:
		return 0, 0, fmt.Errorf("--max-input-tokens (%d) exceeds what the model takes (%d tokens: %s); lower it", maxInput, f.MaxTokens, limitBasis(f))
	}
	switch {
	case !cfg.WarmMaxSet:
		warmMax = min(warmMax, maxInput)
	case warmMax > maxInput:
		return 0, 0, fmt.Errorf("--warm-max-tokens (%d) exceeds the model's input limit (%d tokens: %s); lower it", warmMax, maxInput, limitBasis(f))
	}
	return maxInput, warmMax, nil
}

// limitBasis says where a model's input limit comes from, for messages.
func limitBasis(f *modelinfo.Facts) string {
	if f.Arch.Encoder && f.MaxTokens < f.TrainContext {
		return fmt.Sprintf("an encoder takes a sequence in one call, whose attention scores must fit %d MiB; its training context is %d", family.DefaultAttentionBytes>>20, f.TrainContext)
	}
	if f.TrainContext > 0 {
		return "its training context"
	}
	return "the default where the GGUF gives no context length"
}

// routingPrompts turns a family's prompts into routing's, with a query and a
// document prompt given by flag in their place; the convention is then named
// "custom". A query prompt given without {instruction} takes none; one with it and
// no default instruction of its family's takes Qwen3's web-search task.
func routingPrompts(p family.Prompts, query, document *string) routing.Prompts {
	r := routing.Prompts{Family: p.Name, Query: p.Query, Instruction: p.Instruction, Document: p.Document}
	if query != nil {
		r.Family, r.Query = "custom", *query
		switch {
		case !strings.Contains(r.Query, family.Placeholder):
			r.Instruction = ""
		case r.Instruction == "":
			r.Instruction = family.Qwen3Instruction
		}
	}
	if document != nil {
		r.Family, r.Document = "custom", *document
	}
	return r
}

// capLengths caps each length at most, without repeats.
func capLengths(lengths []int, most int) []int {
	out := make([]int, 0, len(lengths))
	for _, n := range lengths {
		out = append(out, min(n, most))
	}
	return slices.Compact(out)
}

// workerSpec runs this executable as `embed-stack worker` with a.
func workerSpec(exe string, a backends.WorkerArgs) backends.WorkerSpec {
	return backends.WorkerSpec{Path: exe, Args: append([]string{"worker"}, a.Args()...)}
}

// router returns a router over the engine's tokenizer and workers with the given
// limits; Dim is the model's native dimension whatever c says.
func (e *engine) router(c routing.Config) *routing.Router {
	c.Dim = e.facts.Dim
	c.Rerank, c.CrossEncoder = e.facts.Rerank, e.facts.CrossEncoder
	c.Prompts, c.Frame = e.prompts, e.frame
	c.MaxInputTokens, c.WarmMaxTokens = e.maxInput, e.warmMax
	// Queries go to the warm worker beside a batch of documents in flight, which
	// it interrupts for them (backends.ShortJobs).
	info := e.warm.Info
	if e.warmInfo != nil {
		info = e.warmInfo
	}
	c.ShortCalls = func(seqs [][]int32) bool { return info().ShortJobs.Fits(seqs) }
	return &routing.Router{
		Config:    c,
		Tokenizer: e.tok,
		Cl100k:    &lazyCl100k{},
		Warm:      warmBackend{e.warm},
		Long:      longBackend{e.long},
	}
}

// isTerminal reports whether f is an interactive terminal (where a progress bar
// redrawn with '\r' makes sense), as opposed to a pipe or file read as a log.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// modelRequired is the error of serve and embed without --model.
const modelRequired = "--model is required: a GGUF file or a Hugging Face reference such as Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0"

// withoutHubAdvice completes a Hub reference's failure to reach the Hub, or to find
// the model in the cache offline, with the way to run without the Hub at all: `make
// run` and the container image serve a Hub reference by default, and a newcomer on
// an air-gapped machine or a CI box should learn within seconds which local file to
// serve instead, in the words of where it runs: `make run` only in the source tree,
// a mounted directory in a container, `embed-stack pull` elsewhere (a release
// archive's binary).
func withoutHubAdvice(err error) string {
	if !errors.Is(err, hub.ErrNetwork) && !errors.Is(err, hub.ErrNotCached) {
		return ""
	}
	advice := ". Without access to the Hub, set HF_ENDPOINT to a mirror you can reach, or serve a local GGUF file: --model path/to/model.gguf"
	switch {
	case inSourceTree():
		return advice + " (make run MODEL=path/to/model.gguf; make run MODEL=models/tiny.gguf " +
			"builds and serves a small random-weight test model with no download)"
	case inContainer():
		return advice + " in a directory mounted into the container (docker run -v DIR:/models ... serve --model /models/model.gguf), " +
			"or fill the Hugging Face cache volume with `embed-stack pull REF` where the Hub is reachable"
	}
	return advice + ", or run `embed-stack pull REF` where the Hub is reachable and copy its Hugging Face cache (HF_HOME) here"
}

// inSourceTree reports whether the working directory is embed-stack's source tree,
// where `make run` works.
func inSourceTree() bool {
	for _, p := range []string{"Makefile", filepath.Join("cmd", "embed-stack", "main.go")} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// inContainer reports whether this process runs in a Docker or Podman container,
// by the files their runtimes create.
func inContainer() bool {
	for _, p := range []string{"/.dockerenv", "/run/.containerenv"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
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

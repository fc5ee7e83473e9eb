// Package modelrun prepares one model to run as both `embed-stack serve` and
// `embed-stack embed` run it: the GGUF's facts (package modelinfo) and input limits,
// its tokenizer, its special tokens and prompts, the weight file its workers load
// (package weights: the GGUF, or its F16 matrices converted to BF16), the command lines of its warm and
// ephemeral workers (not yet started), the router over them (package routing), and
// the ephemeral workers' admission sized to the model and this machine
// (backends.CapacityConfig).
//
// It is configured by the command (Config: the flags' values, with every
// environment read done by the caller) and refuses to know about HTTP, flags'
// parsing, the Hugging Face Hub (Config.Resolve) and cgo: which device the workers
// may have is the caller's to say (Config.ProbeDevice), since telling needs
// llama.cpp.
package modelrun

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/tokenizer"
	"github.com/embed-stack/embed-stack/weights"
)

// Config is what `serve` and `embed` share: which model, and how the worker
// processes that run it are started. Both commands bind their flags to it, so that
// the shared flags are spelt, defaulted and checked alike. The zero value of each
// field is documented; the flags' defaults are the command's.
type Config struct {
	// Model is a local GGUF path or, with Resolve, a reference Resolve turns into one.
	Model string
	// Resolve turns Model into a local GGUF path (the command's: a Hugging Face
	// reference is downloaded into the cache, and its failure worded with the ways
	// to run without the Hub); nil takes Model as a path.
	Resolve func(ctx context.Context, model string) (string, error)
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
	// WarmReleaseKV is --warm-release-kv: how long the warm worker idles before
	// it hands its long inputs' KV cache back to the OS (its --release-kv); 0
	// never.
	WarmReleaseKV time.Duration
	// EphemeralNice lowers the CPU priority of ephemeral workers' decoding threads
	// (their --nice), so that the warm worker's short requests go first.
	EphemeralNice int
	// MaxInputTokens is the longest input at all; it must fit the model's context
	// (modelinfo.Facts.MaxTokens). WarmMaxTokens and MaxInputTokens left at their
	// defaults (MaxInputSet and WarmMaxSet false) are cut to the model's.
	MaxInputTokens          int
	MaxInputSet, WarmMaxSet bool
	// MaxEphemeral and MaxEphemeralTokens bound the ephemeral workers (0: sized to
	// the machine; see Model.Capacity).
	MaxEphemeral, MaxEphemeralTokens int
	// ReadyTimeout is a starting worker's stall timer.
	ReadyTimeout time.Duration
	// LogFormat and LogLevel are passed on to the workers so their lines match ours.
	LogFormat, LogLevel string
	// Device is where the workers compute (their --device, --gpu-layers and
	// --backend-dir).
	Device backends.DeviceArgs
	// ProbeDevice says that a worker with Device might run on a GPU, so that
	// Prepare asks a child which device a worker gets (backends.ProbeDevice);
	// false means the CPU.
	ProbeDevice bool
	// Executable is the embed-stack binary the workers run as `embed-stack
	// worker`; "" is this process's own.
	Executable string
	// Weights is --weights: whether the workers load the GGUF as it is or a copy
	// with its F16 matrices converted to BF16 (package weights: auto, file or
	// bf16); "" means auto.
	Weights string
	// WeightsCache is the folder of converted weight files (--weights-cache); ""
	// converts none.
	WeightsCache string
}

// Model is one model made ready to run: the resolved GGUF, its facts, the
// tokenizer read from it, and the (not yet started) warm and ephemeral workers.
// The caller starts Warm (or a backends.OnDemand over it), builds a router with
// Router, and closes what it started. Not safe for concurrent changes.
type Model struct {
	// Path is the local GGUF file, as given: its facts, tokenizer and identity.
	Path string
	// Weights is the file the workers load: Path, or a copy converted at load
	// (package weights).
	Weights   weights.Result
	Facts     *modelinfo.Facts
	Tokenizer *tokenizer.Tokenizer
	// Frame and Prompts are the special tokens and prompts of the model's inputs
	// (modelinfo.Facts.Frame, the family's prompts with the configuration's changes).
	Frame   routing.Frame
	Prompts routing.Prompts
	// MaxInput and WarmMax are the model's input limits: the configuration's, cut
	// to the model's context where left at their defaults (limits).
	MaxInput, WarmMax int
	// WarmArgs are the warm worker's command line, which Warm.Spec runs as
	// `embed-stack worker`; another warm backend (backends.WarmProgram.Spec) takes them too.
	WarmArgs backends.WorkerArgs
	Warm     *backends.Warm
	Long     *backends.Ephemeral
	// WarmInfo, when set, describes the running warm worker in place of
	// Warm.Info: serve runs copies of Warm (backends.OnDemand), never Warm itself.
	WarmInfo func() backends.EngineInfo
	// Device is where the workers will run, probed before any starts
	// (backends.ProbeDevice); nil when no GPU can be there (Config.ProbeDevice
	// false), which means the CPU.
	Device *backends.Device

	// cfg is the configuration Prepare was given, for Capacity.
	cfg Config
}

// Prepare resolves the model (Config.Resolve), reads its facts and its tokenizer,
// and prepares the workers. Nothing is started: serve answers HTTP while the warm
// worker loads, embed waits for it.
func Prepare(ctx context.Context, cfg Config, logger *slog.Logger) (*Model, error) {
	modelPath := cfg.Model
	if cfg.Resolve != nil {
		var err error
		if modelPath, err = cfg.Resolve(ctx, cfg.Model); err != nil {
			return nil, err
		}
	}
	facts, err := modelinfo.Read(modelPath, modelinfo.Options{Task: cfg.Task, Pooling: cfg.Pooling, AllowPoolingMismatch: cfg.AllowPoolingMismatch, Prompts: cfg.Prompts})
	if err != nil {
		return nil, err
	}
	maxInput, warmMax, err := limits(cfg, facts)
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

	exe := cfg.Executable
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find own executable to start workers: %w", err)
		}
	}
	var device *backends.Device
	if cfg.ProbeDevice {
		if device, err = backends.ProbeDevice(exe, cfg.Device); err != nil {
			return nil, err
		}
		logger.Info("device", "device", device.Name, "description", device.Description, "backend", device.Backend,
			"memory_total_mib", device.MemoryTotal>>20, "memory_free_mib", device.MemoryFree>>20, "note", device.Note,
			"cpu_variant", device.CPUVariant)
	}
	// weights.Load asks which CPU kernels the workers get only when it has
	// matrices to convert (Auto: whether to; both modes: whether in the layout of
	// embed-stack's BF16 kernels); a worker that may have a GPU was probed above.
	probe := func() (*backends.Device, error) {
		if device != nil {
			return device, nil
		}
		return backends.ProbeDevice(exe, cfg.Device)
	}
	w := weights.Load(ctx, weights.Request{Source: modelPath, Mode: cfg.Weights, Device: probe, CacheDir: cfg.WeightsCache, Rerank: facts.Rerank}, logger)
	// --threads only when set: a worker's default depends on its device (every
	// CPU on the CPU, a few on a GPU; see llama.Config.Threads).
	base := backends.WorkerArgs{Model: w.Path, Threads: cfg.Threads, Pooling: facts.WorkerPooling(),
		LogFormat: cfg.LogFormat, LogLevel: cfg.LogLevel, DeviceArgs: cfg.Device}
	// A reranker's workers return the two logits of yes and no per sequence.
	outputs := facts.Outputs()
	if facts.Rerank {
		base.Task = backends.TaskRerank
	}
	warmArgs, longArgs := base, base
	warmArgs.Ctx, warmArgs.Batch, warmArgs.Buckets = warmMax, cfg.DecodeTokens, capLengths(cfg.WarmBuckets, warmMax)
	warmArgs.ReleaseKV = cfg.WarmReleaseKV
	longArgs.Nice = cfg.EphemeralNice
	return &Model{
		Path:      modelPath,
		Weights:   w,
		Device:    device,
		Facts:     facts,
		Tokenizer: tok,
		Frame:     frame,
		Prompts:   prompts,
		MaxInput:  maxInput,
		WarmMax:   warmMax,
		WarmArgs:  warmArgs,
		Warm: &backends.Warm{
			Spec:         workerSpec(exe, warmArgs),
			ReadyTimeout: cfg.ReadyTimeout,
			Logger:       logger.With("worker", "warm"),
			MinTokens:    warmMax,
			NEmbd:        outputs,
		},
		Long: &backends.Ephemeral{
			Spec:         workerSpec(exe, longArgs),
			ReadyTimeout: cfg.ReadyTimeout,
			Logger:       logger.With("worker", "ephemeral"),
			NEmbd:        outputs,
		},
		cfg: cfg,
	}, nil
}

// ContextLength is the model's context as /info and /v1/models report it: its
// training context, or where the GGUF gives none, what it takes.
func (m *Model) ContextLength() int {
	if m.Facts.TrainContext > 0 {
		return m.Facts.TrainContext
	}
	return m.Facts.MaxTokens
}

// limits are a model's input limits: --max-input-tokens and --warm-max-tokens as
// given, or where left at their defaults, cut to what the model takes
// (modelinfo.Facts.MaxTokens: 512 for BERT), so that the warm and ephemeral
// thresholds follow the model. A limit given above what the model takes is refused.
func limits(cfg Config, f *modelinfo.Facts) (maxInput, warmMax int, err error) {
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

// workerSpec runs exe as `embed-stack worker` with a.
func workerSpec(exe string, a backends.WorkerArgs) backends.WorkerSpec {
	return backends.WorkerSpec{Path: exe, Args: append([]string{"worker"}, a.Args()...)}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/hub"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/modelrun"
	"github.com/embed-stack/embed-stack/weights"
)

// defineWorkerFlags defines the flags of the workers: where and how they compute.
func defineWorkerFlags(s *flagconfig.Set, c *modelrun.Config) {
	c.Device.AddFlags(s)
	s.Int(&c.Threads, "threads", "N", 0, "decode threads per worker (0 = one per CPU; a few on a GPU)").AtLeast(0)
	s.Int(&c.DecodeTokens, "decode-tokens", "N", 0, "tokens per llama.cpp decode call of the warm worker, its batch size (0 = the default for the device)").AtLeast(0).Old("batch-tokens")
	s.Int(&c.WarmMaxTokens, "warm-max-tokens", "N", 8192, "inputs of up to N tokens go to the warm worker, which stays loaded; each longer one gets an ephemeral worker of its own").AtLeast(1).
		More("An ephemeral worker is sized to its input and exits when done (docs/routing.md). Left at its default, the model's input limit where that is shorter.")
	s.Duration(&c.ReadyTimeout, "worker-ready-timeout", "DURATION", 2*time.Minute, "how long a loading worker may show no progress before it counts as hung")
	s.String(&c.WeightsCache, "weights-cache", "DIR", "", "folder of the weight files converted at load (--weights)").
		More("Default: embed-stack/weights beside the Hugging Face cache (HF_HUB_CACHE's parent: ~/.cache/huggingface/embed-stack/weights; in the container image, its /data/huggingface volume). A file is named by its source's path, size and modification time, and converted again when they change.")
	s.Bool(&c.AllowPoolingMismatch, "allow-pooling-mismatch", false, "the older spelling of --pooling last").
		More("For every model without a --pooling of its own: its vectors are last-token pooled, which is right only for a model trained that way.")
}

// defineMaxInput defines --max-input-tokens.
func defineMaxInput(s *flagconfig.Set, c *modelrun.Config) {
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

// Help of --weights, which serve takes per model and embed for its one model.
const (
	weightsHelp = "weights the workers compute with: auto, file or bf16"
	weightsMore = "auto: on a CPU with AVX-512 BF16 whose kernels multiply BF16 faster than F16 (embed-stack's own kernels, the default, on AMD's Zen 4 and 5 and Intel's Sapphire Rapids and later; with --cpu-accel off ggml's variant, on AMD's only), with no GPU, the file's F16 matrices are converted to BF16 once, into --weights-cache (docs/performance.md); elsewhere the file as it is. file: the file as it is. bf16: F16, F32 and Q8_0 matrices converted to BF16 wherever the model runs (a Q8_0 file's then take 1.9 times the memory). A conversion that fails loads the file as it is, with a warning."
)

// promptsHelp is --prompts' help line.
func promptsHelp() string {
	return "prompt convention: auto, or one of " + family.PromptNames()
}

// defineModelSettings defines embed's --pooling, --prompts, --query-prompt and
// --document-prompt, for its one model; serve's take MODEL=VALUE too
// (parseModelSettings). A prompt given, even empty, is told from none by its
// source (parseEmbedFlags).
func defineModelSettings(s *flagconfig.Set, c *modelrun.Config, query, document *string) {
	s.String(&c.Pooling, "pooling", "MODE", "", poolingHelp).More(poolingMore)
	s.String(&c.Prompts, "prompts", "NAME", "auto", promptsHelp()).More(promptsMore)
	s.String(query, "query-prompt", "TEXT", "", queryPromptHelp).More(queryPromptMore)
	s.String(document, "document-prompt", "TEXT", "", documentPromptHelp)
	s.String(&c.Weights, "weights", "MODE", weights.Auto, weightsHelp).More(weightsMore)
}

// noteSources records which input limits were set (flag, environment or file)
// rather than left at their defaults, which are cut to each model's context.
func noteSources(s *flagconfig.Set, c *modelrun.Config) {
	c.MaxInputSet = s.Source("max-input-tokens") != flagconfig.FromDefault
	c.WarmMaxSet = s.Source("warm-max-tokens") != flagconfig.FromDefault
}

// defineEphemeralFlags defines the bounds of the ephemeral workers.
func defineEphemeralFlags(s *flagconfig.Set, c *modelrun.Config) {
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

// checkModelConfig refuses what no single flag's bounds can: a warm worker's limit
// set above the longest input (one left at its default is cut to it), and a
// malformed device. noteSources comes first.
func checkModelConfig(c *modelrun.Config) error {
	if c.WarmMaxTokens > c.MaxInputTokens && !c.WarmMaxSet {
		c.WarmMaxTokens = c.MaxInputTokens
	}
	if c.WarmMaxTokens > c.MaxInputTokens {
		return fmt.Errorf("--warm-max-tokens (%d) is larger than --max-input-tokens (%d); lower it", c.WarmMaxTokens, c.MaxInputTokens)
	}
	return checkDevice(c.Device)
}

// modelConfig completes c for the models of a run: a --model that is a Hugging
// Face reference is downloaded into the Hugging Face cache (with a progress bar
// when stderr is a terminal; its failure worded with the ways to run without the
// Hub), a worker that may have a GPU is probed first (mayHaveGPU), and weights
// converted at load go beside the Hugging Face cache unless --weights-cache says
// where.
func modelConfig(c modelrun.Config, logger *slog.Logger) modelrun.Config {
	ho := hub.OptionsFromEnv()
	ho.Logger, ho.Progress = logger, os.Stderr
	ho.IsTerminal = isTerminal(os.Stderr)
	c.Resolve = func(ctx context.Context, ref string) (string, error) {
		path, err := hub.Resolve(ctx, ref, ho)
		if err != nil {
			return "", fmt.Errorf("--model: %w%s", err, withoutHubAdvice(err))
		}
		return path, nil
	}
	c.ProbeDevice = mayHaveGPU(c.Device)
	if c.WeightsCache == "" {
		c.WeightsCache = defaultWeightsCache(ho)
	}
	return c
}

// defaultWeightsCache is --weights-cache's default (serve's, embed's and bench's):
// embed-stack/weights beside the Hugging Face cache of ho, or "" where there is
// none (no home folder), which converts nothing.
func defaultWeightsCache(ho hub.Options) string {
	dir, err := ho.Dir()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(dir), "embed-stack", "weights")
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

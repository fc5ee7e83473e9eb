package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/llama"
)

// runWorker is `embed-stack worker`: one llama.cpp context serving the worker
// protocol on a Unix socket. serve starts it; running it by hand is for debugging
// (--ignore-stdin keeps it up with stdin on /dev/null).
func runWorker(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("embed-stack worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		model       = fs.String("model", "", "GGUF model `path` (required)")
		socket      = fs.String("socket", "", "Unix socket `path` to serve the worker protocol on (required; its directory should be private)")
		ctxTokens   = fs.Int("ctx", 0, "context size in `tokens`: the longest sequence accepted and the packing budget per round (0 = 8192, capped at the model's training context)")
		batch       = fs.Int("batch", 0, "`tokens` per llama.cpp decode call of packed short inputs (n_batch = n_ubatch; 0 = min(ctx, 512)); a long input's calls take at most 256 of them, fewer where their attention scores would pass 512 MiB")
		threads     = fs.Int("threads", 0, "llama.cpp decode `threads` (0 = number of CPUs)")
		seqs        = fs.Int("seqs", 0, "sequences packed into one round (0 = 64, at most 256)")
		buckets     = fs.String("buckets", "", "comma-separated sequence `lengths` warmed at start: before the worker reports ready, each llama.cpp context that embeds inputs of such a length is created and decodes one short throwaway input, so that the first request of any size is as fast as later ones (mlx-embed-server takes the same flag)")
		task        = fs.String("task", taskEmbed, "`embed`: return each sequence's last-token hidden state; rerank: return the logits of the tokens yes and no at its last token, for a Qwen3-Reranker (serve passes it when it serves one)")
		nice        = fs.Int("nice", 0, "lower the decoding threads' CPU priority by `n` (0-19); serve starts ephemeral workers at 10 so the warm worker's short requests go first")
		ignoreStdin = fs.Bool("ignore-stdin", false, "keep running when stdin reaches EOF (by default EOF on stdin stops the worker, so it dies with its parent)")
		logFormat   = fs.String("log-format", "text", "log `format`: text or json")
		logLevel    = fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	)
	var dev deviceFlags
	addDeviceFlags(fs, &dev)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: embed-stack worker --model PATH --socket PATH [flags]\n\n"+
			"Loads a GGUF through llama.cpp and embeds token-id sequences sent over the worker\n"+
			"protocol (docs/architecture.md). Started by `embed-stack serve`.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	logger, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return 2
	}
	if *model == "" || *socket == "" {
		fmt.Fprintln(stderr, "embed-stack worker: --model and --socket are required")
		return 2
	}
	if *task != taskEmbed && *task != taskRerank {
		fmt.Fprintf(stderr, "embed-stack worker: --task %q is not one of embed, rerank\n", *task)
		return 2
	}
	if err := dev.check(); err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return 2
	}
	tel, err := startTelemetry("worker", false, logger)
	if err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return 2
	}
	defer tel.stop()
	warmUpLengths, err := parseLengths(*buckets)
	if err != nil {
		fmt.Fprintln(stderr, "embed-stack worker: --buckets:", err)
		return 2
	}
	cfg := backends.WorkerConfig{SocketPath: *socket, IgnoreStdin: *ignoreStdin, Logger: logger}
	load := func() (backends.Engine, backends.EngineInfo, error) {
		c := llama.Config{
			ModelPath: *model, ContextTokens: *ctxTokens, BatchTokens: *batch,
			Threads: *threads, MaxSeqs: *seqs, Nice: *nice,
			Rerank: *task == taskRerank,
		}
		dev.config(&c)
		e, err := llama.Open(c)
		if err != nil {
			return nil, backends.EngineInfo{}, explainDeviceError(err)
		}
		d := e.Info().Device
		logger.Info("device", "device", d.Name, "description", d.Description, "backend", d.Backend,
			"gpu_layers", d.GPULayers, "memory_total_mib", d.MemoryTotal>>20, "memory_free_mib", d.MemoryFree>>20, "note", d.Note)
		// Log before and after warming: the serve side's ready timer is a stall
		// timer that any worker output resets, so a slow warm-up on a loaded
		// machine is not mistaken for a hang.
		if len(warmUpLengths) > 0 {
			start := time.Now()
			logger.Info("model loaded; warming up", "buckets", warmUpLengths)
			if err := e.WarmUp(context.Background(), warmUpLengths); err != nil {
				e.Close()
				return nil, backends.EngineInfo{}, err
			}
			logger.Info("warmed up", "buckets", warmUpLengths, "ms", time.Since(start).Milliseconds())
		}
		info := e.Info()
		name := info.ModelName
		if name == "" {
			name = filepath.Base(*model)
		}
		ei := backends.EngineInfo{NEmbd: info.NEmbd, MaxTokens: info.ContextTokens, MaxBatchTokens: info.BatchTokens, Model: name, Device: deviceOf(info.Device)}
		if s := info.ShortJobs; s.MaxTokens > 0 {
			ei.ShortJobs = &backends.ShortJobs{MaxTokens: s.MaxTokens, BatchTokens: s.BatchTokens, MaxSeqs: s.MaxSeqs}
		}
		return e, ei, nil
	}
	if err := backends.RunWorker(context.Background(), cfg, traceLoad(load)); err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return 1
	}
	_ = os.Stdout.Sync()
	return 0
}

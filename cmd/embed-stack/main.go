// Command embed-stack serves Qwen3-Embedding models behind an OpenAI-compatible
// POST /v1/embeddings.
//
// One binary plays every role: `serve` is the HTTP API (it holds the tokenizer,
// never the weights) and starts `worker` children that load the GGUF through
// llama.cpp. Configuration is read here and only here; packages take it as exported
// struct fields.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/embed-stack/embed-stack/internal/buildinfo"
	"github.com/embed-stack/embed-stack/telemetry"
)

const usage = `embed-stack: an OpenAI-compatible embedding server for Qwen3-Embedding.

Usage:
  embed-stack serve  --model PATH [flags]   run the HTTP API (starts its own workers)
  embed-stack embed  --model PATH --input FILE --output FILE [flags]
                                            embed a file offline into JSONL, .npy or Parquet (resumable;
                                            --shard i/N embeds one slice)
  embed-stack merge  --input FILE --output FILE --shards N
                                            merge the shards' parts into one output, in input order
  embed-stack worker --model PATH --socket PATH [flags]
                                            run one llama.cpp worker (started by serve)
  embed-stack bench  --model PATH [flags]   benchmark against the engine floor and peers (docs/performance.md)
  embed-stack devices [--device D]          print the device (CPU, CUDA, Metal) a worker would run on
  embed-stack version                       print the version

Run "embed-stack COMMAND --help" (serve, embed, merge, worker, bench) for its flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "embed":
		return runEmbed(args[1:], stderr)
	case "merge":
		return runMerge(args[1:], stderr)
	case "worker":
		return runWorker(args[1:], stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "devices":
		return runDevices(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, buildinfo.Get())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "embed-stack: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// newLogger builds the process logger from --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(telemetry.NewLogHandler(slog.NewTextHandler(w, opts))), nil
	case "json":
		opts.ReplaceAttr = durationString
		return slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(w, opts))), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// durationString writes a duration in JSON logs as the text format writes it, a Go
// duration string ("grace":"30s"), instead of slog's JSON default, an integer of
// nanoseconds ("grace":30000000000) that says neither its unit nor its size at a
// glance.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

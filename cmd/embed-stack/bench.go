package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/llama"
	"github.com/embed-stack/embed-stack/bench"
	"github.com/embed-stack/embed-stack/hub"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/telemetry"
	"github.com/embed-stack/embed-stack/weights"
)

// benchCommand is `embed-stack bench`: its flags and the run are package bench's
// (bench.Flags); this wires in the engine floor, which needs llama.cpp.
type benchCommand struct {
	f              bench.Flags
	args           []string
	stdout, stderr io.Writer
}

func newBench(args []string, stdout, stderr io.Writer) (command, int) {
	c := &benchCommand{args: args, stdout: stdout, stderr: stderr}
	f := &c.f
	s := bench.NewFlagSet(f)
	err := f.Parse(s, args)
	var logger *slog.Logger
	if err == nil {
		logger, err = telemetry.NewLogger(stderr, "text", f.LogLevel)
	}
	if err != nil {
		return nil, flagconfig.Report(err, s.Name, stdout, stderr)
	}
	// backends/llama logs llama.cpp's lines through the default logger.
	slog.SetDefault(logger)
	if f.WeightsCache == "" {
		// Where the serve the harness starts would convert: it reads
		// EMBED_STACK_WEIGHTS_CACHE from the environment it inherits, else takes
		// the default; passed to it explicitly (bench.Flags.Session), the floor
		// and it load one converted file.
		f.WeightsCache = cmp.Or(os.Getenv("EMBED_STACK_WEIGHTS_CACHE"), defaultWeightsCache(hub.OptionsFromEnv()))
	}
	return c, 0
}

// Run benchmarks and writes the report: the table to stdout, and to the
// --markdown and --json files. Every server it started is stopped when it returns.
func (c *benchCommand) Run(ctx context.Context) error {
	var rep *bench.Report
	s, err := c.f.Session(c.args, c.stderr)
	if err == nil {
		if c.f.Floor {
			s.Floor = c.floor(s)
		}
		rep, err = s.Run(ctx)
	}
	if err == nil {
		err = c.f.WriteReport(rep, c.stdout)
	}
	if err != nil {
		fmt.Fprintln(c.stderr, "embed-stack bench:", err)
		return exitStatus(1)
	}
	return nil
}

// Close does nothing: the first signal has already stopped the run.
func (c *benchCommand) Close() error { return nil }

// floor opens the engine floor: the same token ids through backends/llama in this
// process, no HTTP, no worker, on the weights --weights chooses as serve's
// workers get theirs (package weights: the file, or its F16 matrices converted
// to BF16 into --weights-cache, auto deciding from this process's CPU kernels).
// It names the CPU kernels and the weights it runs on s.
func (c *benchCommand) floor(s *bench.Session) func(ctx context.Context, ctxTokens int) (bench.Embedder, string, func(), error) {
	f := &c.f
	return func(ctx context.Context, ctxTokens int) (bench.Embedder, string, func(), error) {
		lc := llama.Config{ContextTokens: ctxTokens, Threads: f.Threads, CPUVariant: f.CPUVariant, CPUAccel: f.CPUAccel}
		facts, err := modelinfo.Read(f.Model, modelinfo.Options{})
		if err != nil {
			return nil, "", nil, err
		}
		w := weights.Load(ctx, weights.Request{Source: f.Model, Mode: f.Weights, CacheDir: f.WeightsCache, Rerank: facts.Rerank,
			Device: func() (*backends.Device, error) {
				d, err := llama.Probe(lc)
				return &d, err
			}}, slog.Default())
		lc.ModelPath = w.Path
		eng, err := llama.Open(lc)
		if err != nil {
			return nil, "", nil, err
		}
		info := eng.Info()
		s.CPUKernels, s.Weights = info.Device.CPUVariant, w
		if a := info.Device.CPUAccel; a != "" {
			s.CPUKernels += " with " + a
		}
		if w := info.Device.Warning; w != "" {
			fmt.Fprintln(c.stderr, "bench: warning:", w)
		}
		about := fmt.Sprintf("backends/llama in-process, weights %s, %d threads, context %d, %d tokens per decode call", w.Describe(), f.Threads, info.ContextTokens, info.BatchTokens)
		if w.Converted() {
			about += ", " + w.Path
		}
		return eng, about, func() { eng.Close() }, nil
	}
}

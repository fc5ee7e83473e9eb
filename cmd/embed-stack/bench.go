package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/embed-stack/embed-stack/backends/llama"
	"github.com/embed-stack/embed-stack/bench"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/telemetry"
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
// process, no HTTP, no worker. It names the CPU kernels it runs on s.
func (c *benchCommand) floor(s *bench.Session) func(ctxTokens int) (bench.Embedder, string, func(), error) {
	f := &c.f
	return func(ctxTokens int) (bench.Embedder, string, func(), error) {
		eng, err := llama.Open(llama.Config{ModelPath: f.Model, ContextTokens: ctxTokens, Threads: f.Threads, CPUVariant: f.CPUVariant})
		if err != nil {
			return nil, "", nil, err
		}
		info := eng.Info()
		s.CPUKernels = info.Device.CPUVariant
		if w := info.Device.Warning; w != "" {
			fmt.Fprintln(c.stderr, "bench: warning:", w)
		}
		about := fmt.Sprintf("backends/llama in-process, %d threads, context %d, %d tokens per decode call", f.Threads, info.ContextTokens, info.BatchTokens)
		return eng, about, func() { eng.Close() }, nil
	}
}

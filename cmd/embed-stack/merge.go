package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/embed-stack/embed-stack/batch"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/telemetry"
)

// mergeFlags is the parsed command line of `embed-stack merge`.
type mergeFlags struct {
	input, output           string
	reader                  readerFlags
	shards                  int
	allowMissing, overwrite bool
	logFormat, logLevel     string
}

func newMergeFlagSet(f *mergeFlags) *flagconfig.Set {
	s := flagconfig.New("embed-stack merge", "embed-stack merge --input FILE --output FILE --shards N [flags]",
		"Merges the parts written by `embed-stack embed --shard i/N` into one output holding every\n"+
			"input item's vector exactly once, in input order. It refuses, writing nothing, when a\n"+
			"part is missing or incomplete, or holds a row out of place.")
	s.Env = true
	s.Group("Essentials")
	s.String(&f.input, "input", "FILE", "", "the sharded job's input file (required)")
	s.String(&f.output, "output", "FILE", "", "the sharded job's --output (required): its parts OUTPUT-0000i-of-0000N are merged into it, as .jsonl, .npy or .parquet")
	s.Int(&f.shards, "shards", "N", 0, "the job's shard count (required)")
	s.Group("Input, read as the shards read it")
	f.reader.define(s)
	s.Group("Merge")
	s.Bool(&f.allowMissing, "allow-missing", false, "merge even when input items have no vector (texts the shards skipped with --skip-invalid)")
	s.Bool(&f.overwrite, "overwrite", false, "replace an existing --output that is not an embed-stack output (one that is is always replaced)")
	defineLogFlags(s, &f.logFormat, &f.logLevel)
	return s
}

func parseMergeFlags(args []string, stderr io.Writer, getenv func(string) string) (*mergeFlags, error) {
	f := &mergeFlags{}
	s := newMergeFlagSet(f)
	s.Stderr = stderr
	if err := s.Parse(args, getenv); err != nil {
		return nil, err
	}
	switch {
	case f.input == "" || f.input == "-":
		return nil, errors.New("--input is required: the sharded job's input file")
	case f.output == "" || f.output == "-":
		return nil, errors.New("--output is required: the sharded job's --output file")
	case f.shards < 1:
		return nil, errors.New("--shards is required: the job's shard count N")
	}
	return f, nil
}

// mergeCommand is `embed-stack merge`.
type mergeCommand struct {
	f      *mergeFlags
	logger *slog.Logger
	stderr io.Writer
}

func newMerge(args []string, stdout, stderr io.Writer) (command, int) {
	f, err := parseMergeFlags(args, stderr, os.Getenv)
	if err == nil {
		var logger *slog.Logger
		if logger, err = telemetry.NewLogger(stderr, f.logFormat, f.logLevel); err == nil {
			return &mergeCommand{f: f, logger: logger, stderr: stderr}, 0
		}
	}
	return nil, flagconfig.Report(err, "embed-stack merge", stdout, stderr)
}

// Run merges the parts; stopped by ctx, it writes no output.
func (c *mergeCommand) Run(ctx context.Context) error {
	if err := merge(ctx, c.f, c.logger); err != nil {
		reportFailure(c.logger, c.stderr, c.f.logFormat, "embed-stack merge", err)
		return exitStatus(1)
	}
	return nil
}

// Close does nothing: the first signal has already stopped the merge.
func (c *mergeCommand) Close() error { return nil }

func merge(ctx context.Context, f *mergeFlags, logger *slog.Logger) error {
	reader, err := f.reader.config(f.input)
	if err != nil {
		return err
	}
	if err := batch.CheckPassthrough(splitList(f.reader.passthrough)); err != nil {
		return err
	}
	in, err := os.Open(f.input)
	if err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	parts := make([]string, f.shards)
	for i := range parts {
		parts[i] = batch.WorkPath(batch.ShardPath(f.output, batch.Shard{Index: i, Count: f.shards}))
	}
	m := &batch.Merge{
		Input: in, InputSize: fi.Size(),
		Reader:       reader,
		Parts:        parts,
		Output:       f.output,
		Format:       batch.FormatFor(f.output),
		Passthrough:  splitList(f.reader.passthrough),
		AllowMissing: f.allowMissing,
		Overwrite:    f.overwrite,
		Shards:       true,
		Logger:       logger,
	}
	_, err = m.Run(ctx)
	return err
}

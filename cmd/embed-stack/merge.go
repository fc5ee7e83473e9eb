package main

import (
	"context"
	"errors"
	"flag"
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
	input, output, inputFormat, idField, textField, passthrough string
	shards                                                      int
	allowMissing, overwrite                                     bool
	logFormat, logLevel                                         string
}

func newMergeFlagSet(f *mergeFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("embed-stack merge", flag.ContinueOnError)
	fs.StringVar(&f.input, "input", "", "the sharded job's input `file` (required)")
	fs.StringVar(&f.output, "output", "", "the sharded job's --output `file` (required): the parts OUTPUT-0000i-of-0000N are merged into it (.jsonl, .npy, or .parquet from .parquet.npy parts)")
	fs.IntVar(&f.shards, "shards", 0, "the job's shard count `N` (required)")
	defineReaderFlags(fs, &f.inputFormat, &f.idField, &f.textField, &f.passthrough)
	fs.BoolVar(&f.allowMissing, "allow-missing", false, "merge even when input items have no vector (texts the shards skipped with --skip-invalid)")
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace an existing --output that is not an embed-stack output (one that is is always replaced)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: embed-stack merge --input FILE --output FILE --shards N [flags]\n\n"+
			"Merges the parts written by `embed-stack embed --shard i/N` into one output holding\n"+
			"every input item's vector exactly once, in input order. It refuses, writing nothing,\n"+
			"when a part is missing or incomplete, or holds a row out of place.\n\n"+
			"Every flag can also be set by an environment variable (--shards: EMBED_STACK_SHARDS).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func parseMergeFlags(args []string, stderr io.Writer, getenv func(string) string) (*mergeFlags, error) {
	f := &mergeFlags{}
	fs := newMergeFlagSet(f)
	fs.SetOutput(stderr)
	if _, err := flagconfig.Configure(fs, args, getenv); err != nil {
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
}

func newMerge(args []string, _, stderr io.Writer) (command, int) {
	f, err := parseMergeFlags(args, stderr, os.Getenv)
	if err != nil {
		return nil, refused(stderr, "merge", err)
	}
	logger, err := telemetry.NewLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return nil, refused(stderr, "merge", err)
	}
	return &mergeCommand{f: f, logger: logger}, 0
}

// Run merges the parts; stopped by ctx, it writes no output.
func (c *mergeCommand) Run(ctx context.Context) error {
	if err := merge(ctx, c.f, c.logger); err != nil {
		c.logger.Error("embed-stack merge failed", "error", err)
		return exitStatus(1)
	}
	return nil
}

// Close does nothing: the first signal has already stopped the merge.
func (c *mergeCommand) Close() error { return nil }

func merge(ctx context.Context, f *mergeFlags, logger *slog.Logger) error {
	format, err := batch.ParseInputFormat(f.inputFormat, f.input)
	if err != nil {
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
		Reader:       batch.ReaderConfig{Format: format, IDField: f.idField, TextField: f.textField},
		Parts:        parts,
		Output:       f.output,
		Format:       batch.FormatFor(f.output),
		Passthrough:  splitList(f.passthrough),
		AllowMissing: f.allowMissing,
		Overwrite:    f.overwrite,
		Logger:       logger,
	}
	_, err = m.Run(ctx)
	return err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/batch"
	"github.com/embed-stack/embed-stack/batch/chroma"
	"github.com/embed-stack/embed-stack/batch/routed"
	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/modelrun"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/served"
	"github.com/embed-stack/embed-stack/telemetry"
	"github.com/embed-stack/embed-stack/weights"
)

// embedFlags is the parsed command line of `embed-stack embed`.
type embedFlags struct {
	input, output, inputType, instruction string
	reader                                readerFlags
	dimensions, batchSize, inFlight       int
	overwrite, skipInvalid, printConfig   bool
	progressEvery                         time.Duration
	shardSpec, configPath                 string
	shards                                int
	storeText                             bool
	// queryPrompt and documentPrompt are --query-prompt and --document-prompt,
	// which the model takes when given: set rather than left at their default.
	queryPrompt, documentPrompt string
	// shard is the slice of the input this run embeds (Count 0: all of it), from
	// --shard, or --shards with JOB_COMPLETION_INDEX.
	shard batch.Shard
	// store is the vector database --output names (chroma://…), nil for a file.
	store *chroma.Store
	// run is the model and its workers (modelrun.Config), flagged as serve's.
	run modelrun.Config
}

// newEmbedFlagSet defines embed's flags. The model and worker flags are named and
// defaulted as serve's, so EMBED_STACK_MODEL, EMBED_STACK_THREADS, … and one
// --config file configure both.
func newEmbedFlagSet(f *embedFlags) *flagconfig.Set {
	s := flagconfig.New("embed-stack embed", "embed-stack embed --model MODEL --input FILE --output FILE [flags]",
		"Embeds every text of a file (or standard input) offline, with the same wrapping, limits\n"+
			"and workers as serve but no HTTP, and writes the vectors in input order as JSONL, .npy or\n"+
			"Parquet. Run it again after an interruption to resume: items already written are skipped.")
	s.Env = true
	s.Footer = "docs/batch.md describes the formats, resume, shards and merge."
	e := &f.run
	s.Group("Essentials")
	s.String(&e.Model, "model", "MODEL", "", "the model: a GGUF file, or a Hugging Face reference such as Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0, as for serve (required)")
	s.String(&f.input, "input", "FILE", "-", "the texts: one per line, or JSONL objects with an id and a text (.jsonl and .ndjson files, or --input-format); - is standard input")
	s.String(&f.output, "output", "FILE", "", "where the vectors go, by extension: .parquet, .npy (float32 [N, dim], with the ids in FILE.npy.ids, one a line as text), else JSONL; - is standard output (JSONL). An existing output is resumed (required)").
		More("chroma://HOST[:PORT]/COLLECTION[?tenant=T&database=D] upserts into a running Chroma server's collection instead.")
	s.String(&f.configPath, flagconfig.ConfigFlag, "FILE", "", "read settings from a TOML, YAML or JSON file, a key per flag (batch_size = 128); it may hold serve's settings too, which embed ignores")
	s.Bool(&f.printConfig, "print-config", false, "print the effective settings, each with its source, as a --config file, and exit")
	s.Group("Input")
	f.reader.define(s)
	s.Bool(&f.storeText, "store-text", false, "with a chroma:// --output, store each item's text as its record's document")
	s.Group("Embedding")
	s.String(&f.inputType, "input-type", "TYPE", "document", "embed the texts as document, or query (with the instruction)")
	s.String(&f.instruction, "instruction", "TEXT", "", "the instruction of queries (--input-type query), where the model's query prompt takes one").
		More("Default: its convention's, Qwen3's \"" + routing.DefaultInstruction + "\".")
	defineModelSettings(s, e, &f.queryPrompt, &f.documentPrompt)
	s.Int(&f.dimensions, "dimensions", "N", 0, "dimensions of the vectors, from 32 up to the model's: the first N, L2-normalised again (0 = the model's)").AtLeast(0)
	s.Group("The run")
	s.Int(&f.batchSize, "batch-size", "N", batch.DefaultBatchSize, "texts per batch: the unit written to the output, and the most a kill loses").AtLeast(1)
	s.Int(&f.inFlight, "in-flight", "N", batch.DefaultInFlight, "batches embedded at once (2 keeps the workers busy while the next batch is tokenized)").AtLeast(1)
	s.Bool(&f.overwrite, "overwrite", false, "start the output over instead of resuming it")
	s.Bool(&f.skipInvalid, "skip-invalid", false, "skip (and log) input lines that are no item, and texts the model refuses, such as texts over --max-input-tokens, instead of stopping")
	s.String(&f.shardSpec, "shard", "i/N", "", "embed only slice i of N of the input file into OUTPUT with -0000i-of-0000N before its extension; embed-stack merge joins the N parts (docs/batch.md)")
	s.Int(&f.shards, "shards", "N", 0, "N slices, this run's from JOB_COMPLETION_INDEX (as a Kubernetes Indexed Job sets it): --shard $JOB_COMPLETION_INDEX/N").AtLeast(0)
	s.Duration(&f.progressEvery, "progress-interval", "DURATION", 10*time.Second, "when stderr is not a terminal, how often a progress line is logged").AtLeast(1)
	s.Group("Workers (llama.cpp)")
	defineWorkerFlags(s, e)
	defineMaxInput(s, e)
	defineEphemeralFlags(s, e)
	s.Group("Logging")
	defineLogFlags(s, &e.LogFormat, &e.LogLevel)
	return s
}

func parseEmbedFlags(args []string, stdout, stderr io.Writer, getenv func(string) string) (*embedFlags, error) {
	f := &embedFlags{}
	s := newEmbedFlagSet(f)
	s.Shared, s.Stderr = newServeFlagSet(&serveFlags{}).Names(), stderr
	if err := s.Parse(args, getenv); err != nil {
		return nil, err
	}
	if f.printConfig {
		s.Print(stdout)
		return f, nil
	}
	noteSources(s, &f.run)
	if s.Source("query-prompt") != flagconfig.FromDefault {
		f.run.QueryPrompt = &f.queryPrompt
	}
	if s.Source("document-prompt") != flagconfig.FromDefault {
		f.run.DocumentPrompt = &f.documentPrompt
	}
	if f.run.Pooling != "" {
		if _, err := modelinfo.ParsePooling(f.run.Pooling); err != nil {
			return nil, err
		}
	}
	if _, ok := family.PromptsNamed(f.run.Prompts); !ok && f.run.Prompts != "auto" {
		return nil, fmt.Errorf("--prompts %q is not one of auto, %s", f.run.Prompts, family.PromptNames())
	}
	if _, err := weights.ParseMode(f.run.Weights); err != nil {
		return nil, fmt.Errorf("--weights: %w", err)
	}
	switch {
	case f.run.Model == "":
		return nil, errors.New(modelRequired)
	case f.output == "":
		return nil, errors.New("--output is required: a .parquet, .npy or .jsonl file, or - for JSONL on standard output")
	case f.input == f.output && f.input != "-":
		return nil, errors.New("--input and --output are the same file")
	}
	if err := checkModelConfig(&f.run); err != nil {
		return nil, err
	}
	if _, err := routing.ParseInputType(f.inputType); err != nil {
		return nil, fmt.Errorf("--input-type: %w", err)
	}
	format, err := f.reader.config(f.input)
	if err != nil {
		return nil, err
	}
	if f.shard, err = batch.ResolveShard(f.shardSpec, f.shards, getenv("JOB_COMPLETION_INDEX")); err != nil {
		return nil, err
	}
	if f.shard.Count > 0 && (f.input == "-" || f.output == "-") {
		return nil, errors.New("a sharded run needs --input and --output files: each shard reads its slice of the file and writes its own part")
	}
	if chroma.IsURL(f.output) {
		if f.store, err = chroma.ParseURL(f.output); err != nil {
			return nil, err
		}
		f.store.Documents = f.storeText
		if f.reader.passthrough != "" && format.Format != batch.JSONL {
			return nil, errors.New("--passthrough needs JSONL input: its fields become each record's metadata")
		}
		return f, nil
	}
	if f.storeText {
		return nil, errors.New("--store-text needs a chroma:// --output (a file output holds ids and vectors)")
	}
	if batch.FormatFor(f.output) == batch.FormatParquet && f.input == "-" {
		return nil, errors.New("a .parquet --output needs an --input file: it is written from the input once every vector exists")
	}
	if f.reader.passthrough != "" && (batch.FormatFor(f.output) != batch.FormatParquet || format.Format != batch.JSONL) {
		return nil, errors.New("--passthrough needs JSONL input and a .parquet or chroma:// --output")
	}
	if err := batch.CheckPassthrough(splitList(f.reader.passthrough)); err != nil {
		return nil, err
	}
	return f, nil
}

// readerFlags say how the input is read; embed and merge share them, since merge
// must read the input as the shards did.
type readerFlags struct{ format, idField, textField, passthrough string }

func (r *readerFlags) define(s *flagconfig.Set) {
	s.String(&r.format, "input-format", "FORMAT", "auto", "how the input is read: lines, jsonl, or auto (jsonl for .jsonl and .ndjson files)")
	s.String(&r.idField, "id-field", "NAME", "id", "the JSONL field holding each item's id (a string or a number)")
	s.String(&r.textField, "text-field", "NAME", "text", "the JSONL field holding each item's text")
	s.String(&r.passthrough, "passthrough", "NAME,...", "", "JSONL fields copied into each row of a .parquet output (or each record's metadata in a chroma:// one)")
}

// config is the reader configuration the flags give for the input file.
func (r *readerFlags) config(input string) (batch.ReaderConfig, error) {
	format, err := batch.ParseInputFormat(r.format, input)
	return batch.ReaderConfig{Format: format, IDField: r.idField, TextField: r.textField}, err
}

// splitList splits a comma-separated flag value, dropping empty names.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// embedCommand is `embed-stack embed`.
type embedCommand struct {
	f      *embedFlags
	logger *slog.Logger
	stderr io.Writer
}

func newEmbed(args []string, stdout, stderr io.Writer) (command, int) {
	f, err := parseEmbedFlags(args, stdout, stderr, os.Getenv)
	if err != nil {
		return nil, flagconfig.Report(err, "embed-stack embed", stdout, stderr)
	}
	if f.printConfig {
		return nil, 0
	}
	logger, err := telemetry.NewLogger(stderr, f.run.LogFormat, f.run.LogLevel)
	if err != nil {
		return nil, flagconfig.Report(err, "embed-stack embed", stdout, stderr)
	}
	slog.SetDefault(logger)
	return &embedCommand{f: f, logger: logger, stderr: stderr}, 0
}

// Run embeds the input. Stopped by ctx, it keeps what it has written, for the same
// command to resume, and ends with status 130.
func (c *embedCommand) Run(ctx context.Context) error {
	err := embed(ctx, c.f, c.logger)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		c.logger.Warn("interrupted; run the same command again to resume", "output", c.f.output, "signal", stoppedBy(ctx))
		return exitStatus(130)
	}
	reportFailure(c.logger, c.stderr, c.f.run.LogFormat, "embed-stack embed", err)
	return exitStatus(1)
}

// Close does nothing: the first signal has already cancelled the work in flight.
func (c *embedCommand) Close() error { return nil }

func embed(ctx context.Context, f *embedFlags, logger *slog.Logger) error {
	reader, _ := f.reader.config(f.input)
	if f.store != nil {
		// A store takes the passthrough fields with each batch; a .parquet output
		// reads them from the input again at the end.
		reader.Fields = splitList(f.reader.passthrough)
		f.store.Logger = logger
	}
	files, err := batch.Files{Input: f.input, Output: f.output, Shard: f.shard, Overwrite: f.overwrite, Remote: f.store != nil,
		Reader: reader, Passthrough: splitList(f.reader.passthrough), AllowMissing: f.skipInvalid, Logger: logger}.Open()
	if err != nil {
		return err
	}
	defer files.Close()

	model, err := modelrun.Prepare(ctx, modelConfig(f.run, logger), logger)
	if err != nil {
		return err
	}
	dim := model.Facts.Dim
	if f.dimensions != 0 {
		if f.dimensions < 32 || f.dimensions > dim {
			return fmt.Errorf("--dimensions %d: this model gives 32 to %d", f.dimensions, dim)
		}
		dim = f.dimensions
	}
	typ, _ := routing.ParseInputType(f.inputType)
	routingConfig := routing.Config{
		MaxInputs: f.batchSize,
		// A batch is never refused for its total: every input fits alone.
		MaxTotalTokens:     f.batchSize * model.MaxInput,
		DefaultInputType:   typ,
		DefaultInstruction: f.instruction,
		// Every long input of the batches in flight may wait for an ephemeral worker:
		// a batch job queues, where a server refuses.
		EphemeralQueue: f.batchSize * f.inFlight,
	}
	// What makes the vectors, which a resume and a merge check (batch.JobRecord).
	digest, err := gguf.Digest(model.Path, served.DigestCacheDir())
	if err != nil {
		return fmt.Errorf("hash the model file: %w", err)
	}
	rec := &batch.JobRecord{Model: f.run.Model, ModelSHA256: digest, Weights: model.Weights.Type, Pooling: model.Facts.Pooling.String(),
		InputType: typ.String(), Prompt: model.Router(routingConfig).Config.Prefix(typ), Dimensions: dim}
	files.SetRecord(rec)
	if done, err := files.Finished(ctx); done || err != nil {
		return err
	}
	// A store is checked before the warm worker loads the model (only the file's
	// metadata has been read): unreachable, or holding vectors of another
	// dimension, the job fails in seconds.
	var store batch.Store
	if f.store != nil {
		f.store.Job = rec
		if err := f.store.Open(ctx, dim); err != nil {
			return err
		}
		store = f.store
	}
	lim, err := model.Capacity(nil)
	if err != nil {
		return err
	}
	routingConfig.MaxEphemeral, routingConfig.MaxEphemeralTokens = lim.Workers, lim.Tokens
	router := model.Router(routingConfig)

	start := time.Now()
	if err := model.Warm.Start(ctx); err != nil {
		return fmt.Errorf("warm worker: %w", err)
	}
	// Cleanup must run even when ctx is done.
	defer func() {
		if err := model.Warm.Close(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("stop warm worker", "error", err)
		}
	}()
	// Logs name the output as the user gave it (not a .parquet output's work file),
	// and a shard's part as docs/batch.md names it.
	named := []any{"output", f.output}
	if f.shard.Count > 0 {
		named = append(named, "shard", f.shard.String(), "part", files.Work)
	}
	logger.Info("warm worker ready", append([]any{"duration", time.Since(start).Round(time.Millisecond), "dim", dim}, named...)...)

	job := &batch.Job{
		Input:            files.In,
		CountItems:       files.CountItems(),
		Reader:           files.Reader,
		Output:           files.Work,
		OutputAttrs:      named,
		Format:           batch.FormatFor(files.Work),
		Store:            store,
		Overwrite:        f.overwrite,
		TextIDs:          batch.FormatFor(files.Output) == batch.FormatParquet,
		JSONIDs:          batch.FormatFor(files.Output) == batch.FormatParquet,
		Dim:              dim,
		Record:           rec,
		Embedder:         &routed.Embedder{Router: router, Dimensions: f.dimensions},
		BatchSize:        f.batchSize,
		InFlight:         f.inFlight,
		Retryable:        routed.Retryable,
		SkipInvalid:      f.skipInvalid,
		Progress:         os.Stderr,
		Terminal:         isTerminal(os.Stderr),
		ProgressInterval: f.progressEvery,
		Logger:           logger,
	}
	st, err := job.Run(ctx)
	rate := 0.0
	if s := st.Elapsed.Seconds(); s > 0 {
		rate = float64(st.Embedded) / s
	}
	attrs := []any{"embedded", st.Embedded, "resumed", st.Resumed, "invalid", st.Invalid, "blank_lines", st.Blank, "dropped", st.Dropped,
		"seconds", round1(st.Elapsed.Seconds()), "items_per_s", round1(rate)}
	attrs = append(attrs, named...)
	if err != nil {
		logger.Info("embedding stopped", attrs...)
		return err
	}
	logger.Info("embedding done", attrs...)
	return files.Finish(ctx)
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

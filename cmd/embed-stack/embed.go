package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/batch"
	"github.com/embed-stack/embed-stack/batch/chroma"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/telemetry"
)

// embedFlags is the parsed command line of `embed-stack embed`.
type embedFlags struct {
	model          string
	input          string
	output         string
	inputFormat    string
	idField        string
	textField      string
	inputType      string
	instruction    string
	dimensions     int
	batchSize      int
	inFlight       int
	maxEphemeral   int
	maxEphTokens   int
	overwrite      bool
	skipInvalid    bool
	threads        int
	batchTokens    int
	warmMaxTokens  int
	maxInputTokens int
	readyTimeout   time.Duration
	allowPooling   bool
	progressEvery  time.Duration
	logFormat      string
	logLevel       string
	shardSpec      string
	shards         int
	passthrough    string
	storeText      bool

	// shard is the slice of the input this run embeds (Count 0: all of it), from
	// --shard, or --shards with JOB_COMPLETION_INDEX.
	shard  batch.Shard
	device backends.DeviceArgs
	// store is the vector database --output names (chroma://…), nil for a file.
	store *chroma.Store
}

// newEmbedFlagSet defines embed's flags. The model and worker flags are named and
// defaulted as serve's, so EMBED_STACK_MODEL, EMBED_STACK_THREADS, … configure both.
func newEmbedFlagSet(f *embedFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("embed-stack embed", flag.ContinueOnError)
	fs.StringVar(&f.model, "model", "", "model (required): a local GGUF `path` or a Hugging Face reference such as Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0, as for serve")
	fs.StringVar(&f.input, "input", "-", "input `file`: one text per line, or JSONL objects with an id and a text field (by extension .jsonl/.ndjson, or --input-format); - is standard input")
	fs.StringVar(&f.output, "output", "", "output `file` (required): .npy writes a float32 [N, dim] array plus FILE.npy.ids; .parquet a Parquet file; anything else JSONL {\"id\":…,\"embedding\":[…]}; - is standard output (JSONL); chroma://HOST[:PORT]/COLLECTION[?tenant=T&database=D] upserts into a running Chroma server's collection. An existing output is resumed")
	defineReaderFlags(fs, &f.inputFormat, &f.idField, &f.textField, &f.passthrough)
	fs.BoolVar(&f.storeText, "store-text", false, "with a chroma:// --output, store each item's text as its record's document")
	fs.StringVar(&f.inputType, "input-type", "document", "embed the texts as `query` (with the instruction) or document")
	fs.StringVar(&f.instruction, "instruction", routing.DefaultInstruction, "query `task` (with --input-type query)")
	fs.IntVar(&f.dimensions, "dimensions", 0, "output dimensions, 32 up to the model's (Matryoshka truncation, then L2 normalisation); 0 = the model's")
	fs.IntVar(&f.batchSize, "batch-size", batch.DefaultBatchSize, "texts per batch: the unit written to the output, and lost at most on a kill")
	fs.IntVar(&f.inFlight, "in-flight", batch.DefaultInFlight, "batches embedded at once (2 keeps the worker busy while the next batch is tokenized)")
	fs.IntVar(&f.maxEphemeral, "max-ephemeral", 0, "most ephemeral workers (one per input longer than --warm-max-tokens) running at once; the other long inputs wait (0 = from memory and CPUs, as for serve)")
	fs.IntVar(&f.maxEphTokens, "max-ephemeral-tokens", 0, "most tokens the running ephemeral workers hold together, which bounds their KV cache memory (0 = what half the available memory holds)")
	fs.BoolVar(&f.overwrite, "overwrite", false, "start the output over instead of resuming it")
	fs.BoolVar(&f.skipInvalid, "skip-invalid", false, "skip (and log) input lines that are not items and texts the model refuses, such as texts over --max-input-tokens, instead of stopping")
	fs.IntVar(&f.threads, "threads", 0, "llama.cpp decode threads per worker (0 = number of CPUs)")
	fs.IntVar(&f.batchTokens, "batch-tokens", 0, "tokens per llama.cpp decode call in the warm worker (0 = the worker's default)")
	fs.IntVar(&f.warmMaxTokens, "warm-max-tokens", 8192, "longest input (tokens) the warm worker takes; longer inputs each get an ephemeral worker sized to them")
	fs.IntVar(&f.maxInputTokens, "max-input-tokens", 32768, "most tokens per input after wrapping, EOS included")
	fs.DurationVar(&f.readyTimeout, "worker-ready-timeout", 2*time.Minute, "how long a worker may load without progress before it counts as hung")
	fs.BoolVar(&f.allowPooling, "allow-pooling-mismatch", false, "embed with a GGUF whose declared pooling type is not last-token (3) anyway")
	fs.DurationVar(&f.progressEvery, "progress-interval", 10*time.Second, "when stderr is not a terminal, how often a progress line is logged")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.shardSpec, "shard", "", "embed only slice `i/N` of the input file (0 ≤ i < N; lines by byte range, see docs/batch.md) into OUTPUT with -0000i-of-0000N before its extension; merge the N parts with embed-stack merge")
	fs.IntVar(&f.shards, "shards", 0, "`N` slices, this run's index from JOB_COMPLETION_INDEX (as a Kubernetes Indexed Job sets it); same as --shard $JOB_COMPLETION_INDEX/N")
	f.device.AddFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: embed-stack embed --model MODEL --input FILE --output FILE [flags]\n\n"+
			"Embeds every text of a file (or standard input) offline, with the same wrapping,\n"+
			"limits and workers as serve but no HTTP, and writes the vectors in input order.\n"+
			"Run it again after an interruption to resume: ids already in the output are skipped.\n\n"+
			"Every flag can also be set by an environment variable (--model: EMBED_STACK_MODEL).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func parseEmbedFlags(args []string, stderr io.Writer, getenv func(string) string) (*embedFlags, error) {
	f := &embedFlags{}
	fs := newEmbedFlagSet(f)
	fs.SetOutput(stderr)
	if _, err := flagconfig.Configure(fs, args, getenv); err != nil {
		return nil, err
	}
	switch {
	case f.model == "":
		return nil, errors.New(modelRequired)
	case f.output == "":
		return nil, errors.New("--output is required: a .jsonl or .npy file, or - for standard output")
	case f.input == f.output && f.input != "-":
		return nil, errors.New("--input and --output are the same file")
	}
	if err := atLeastOne(intFlag{"--batch-size", f.batchSize}, intFlag{"--in-flight", f.inFlight}); err != nil {
		return nil, err
	}
	if err := checkTokenLimits(f.warmMaxTokens, f.maxInputTokens); err != nil {
		return nil, err
	}
	if f.dimensions < 0 || f.threads < 0 || f.batchTokens < 0 || f.maxEphemeral < 0 || f.maxEphTokens < 0 {
		return nil, errors.New("--dimensions, --threads, --batch-tokens, --max-ephemeral and --max-ephemeral-tokens must not be negative")
	}
	if _, err := routing.ParseInputType(f.inputType); err != nil {
		return nil, fmt.Errorf("--input-type: %w", err)
	}
	if err := checkDevice(f.device); err != nil {
		return nil, err
	}
	format, err := batch.ParseInputFormat(f.inputFormat, f.input)
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
		if f.passthrough != "" && format != batch.JSONL {
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
	if f.passthrough != "" && (batch.FormatFor(f.output) != batch.FormatParquet || format != batch.JSONL) {
		return nil, errors.New("--passthrough needs JSONL input and a .parquet or chroma:// --output")
	}
	return f, nil
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

// defineReaderFlags defines the flags saying how the input is read, which embed and
// merge share: merge must read the input as the shards did.
func defineReaderFlags(fs *flag.FlagSet, format, idField, textField, passthrough *string) {
	fs.StringVar(format, "input-format", "auto", "`format` of the input: lines, jsonl, or auto (jsonl for .jsonl and .ndjson files)")
	fs.StringVar(idField, "id-field", "id", "JSONL field holding each item's id (a string or a number)")
	fs.StringVar(textField, "text-field", "text", "JSONL field holding each item's text")
	fs.StringVar(passthrough, "passthrough", "", "comma-separated JSONL `fields` copied into each row of a .parquet output (or each record's metadata in a chroma:// one)")
}

// embedCommand is `embed-stack embed`.
type embedCommand struct {
	f      *embedFlags
	logger *slog.Logger
}

func newEmbed(args []string, _, stderr io.Writer) (command, int) {
	f, err := parseEmbedFlags(args, stderr, os.Getenv)
	if err != nil {
		return nil, refused(stderr, "embed", err)
	}
	logger, err := telemetry.NewLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return nil, refused(stderr, "embed", err)
	}
	slog.SetDefault(logger)
	return &embedCommand{f: f, logger: logger}, 0
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
	c.logger.Error("embed-stack embed failed", "error", err)
	return exitStatus(1)
}

// Close does nothing: the first signal has already cancelled the work in flight.
func (c *embedCommand) Close() error { return nil }

func embed(ctx context.Context, f *embedFlags, logger *slog.Logger) error {
	format, _ := batch.ParseInputFormat(f.inputFormat, f.input)
	reader := batch.ReaderConfig{Format: format, IDField: f.idField, TextField: f.textField}
	if f.store != nil {
		// A store takes the passthrough fields with each batch; a .parquet output
		// reads them from the input again at the end.
		reader.Fields = splitList(f.passthrough)
		f.store.Logger = logger
	}
	files, err := batch.Files{Input: f.input, Output: f.output, Shard: f.shard, Overwrite: f.overwrite, Remote: f.store != nil,
		Reader:      reader,
		Passthrough: splitList(f.passthrough), AllowMissing: f.skipInvalid, Logger: logger}.Open()
	if err != nil {
		return err
	}
	defer files.Close()
	if done, err := files.Finished(ctx); done || err != nil {
		return err
	}

	eng, err := newEngine(ctx, engineConfig{
		Model:                f.model,
		AllowPoolingMismatch: f.allowPooling,
		Threads:              f.threads,
		BatchTokens:          f.batchTokens,
		WarmMaxTokens:        f.warmMaxTokens,
		MaxInputTokens:       f.maxInputTokens,
		ReadyTimeout:         f.readyTimeout,
		LogFormat:            f.logFormat,
		LogLevel:             f.logLevel,
		Device:               f.device,
	}, logger)
	if err != nil {
		return err
	}
	dim := eng.facts.Dim
	if f.dimensions != 0 {
		if f.dimensions < 32 || f.dimensions > dim {
			return fmt.Errorf("--dimensions %d: this model gives 32 to %d", f.dimensions, dim)
		}
		dim = f.dimensions
	}
	// A store is checked before the warm worker loads the model (only the file's
	// metadata has been read): unreachable, or holding vectors of another
	// dimension, the job fails in seconds.
	var store batch.Store
	if f.store != nil {
		if err := f.store.Open(ctx, dim); err != nil {
			return err
		}
		store = f.store
	}
	typ, _ := routing.ParseInputType(f.inputType)
	lim, err := eng.capacity(f.maxEphemeral, f.maxEphTokens, f.maxInputTokens, f.warmMaxTokens, nil)
	if err != nil {
		return err
	}
	router := eng.router(routing.Config{
		MaxInputs: f.batchSize,
		// A batch is never refused for its total: every input fits alone.
		MaxTotalTokens:     f.batchSize * f.maxInputTokens,
		MaxInputTokens:     f.maxInputTokens,
		WarmMaxTokens:      f.warmMaxTokens,
		DefaultInputType:   typ,
		DefaultInstruction: f.instruction,
		MaxEphemeral:       lim.Workers,
		MaxEphemeralTokens: lim.Tokens,
		// Every long input of the batches in flight may wait for an ephemeral worker:
		// a batch job queues, where a server refuses.
		EphemeralQueue: f.batchSize * f.inFlight,
	})

	start := time.Now()
	if err := eng.warm.Start(ctx); err != nil {
		return fmt.Errorf("warm worker: %w", err)
	}
	// Cleanup must run even when ctx is done.
	defer func() {
		if err := eng.warm.Close(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("stop warm worker", "error", err)
		}
	}()
	logger.Info("warm worker ready", "duration", time.Since(start).Round(time.Millisecond), "dim", dim, "output", files.Work)

	job := &batch.Job{
		Input:            files.In,
		InputSize:        files.Size,
		Reader:           files.Reader,
		Output:           files.Work,
		Format:           batch.FormatFor(files.Work),
		Store:            store,
		Overwrite:        f.overwrite,
		TextIDs:          batch.FormatFor(files.Output) == batch.FormatParquet,
		Dim:              dim,
		Embedder:         &routerEmbedder{router: router, dimensions: f.dimensions},
		BatchSize:        f.batchSize,
		InFlight:         f.inFlight,
		Retryable:        retryable,
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
		"seconds", round1(st.Elapsed.Seconds()), "items_per_s", round1(rate), "output", files.Work}
	if err != nil {
		logger.Info("embedding stopped", attrs...)
		return err
	}
	logger.Info("embedding done", attrs...)
	return files.Finish(ctx)
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// routerEmbedder adapts the router to batch.Embedder: a text the router refuses
// becomes a batch.ItemError with its position in the batch.
type routerEmbedder struct {
	router     *routing.Router
	dimensions int
}

func (e *routerEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	res, err := e.router.Embed(ctx, &routing.Request{Texts: texts, Dimensions: e.dimensions})
	if err == nil {
		return res.Vectors, nil
	}
	var ie *routing.InputError
	if errors.As(err, &ie) && ie.Index >= 0 && ie.Index < len(texts) {
		return nil, &batch.ItemError{Index: ie.Index, Err: itemError(ie)}
	}
	return nil, err
}

// itemError words the router's refusal of one text for the batch job: the job names
// the item by id and input line, so the HTTP API's "input N" (an index into the
// request, here a batch) and its completion wording would only mislead.
func itemError(ie *routing.InputError) error {
	switch ie.Code {
	case routing.CodeContextLength:
		return fmt.Errorf("the text has %d tokens (the instruction, if any, and the end token included); the limit is %d (--max-input-tokens)", ie.Tokens, ie.Limit)
	case routing.CodeEmptyInput:
		return errors.New("the text is empty")
	}
	return ie
}

// retryable says a failure is transient: the warm worker restarting (it died,
// perhaps of this very batch), or every ephemeral slot and queue place taken.
func retryable(err error) (time.Duration, bool) {
	var ue *routing.UnavailableError
	var be *routing.BusyError
	switch {
	case errors.As(err, &ue):
		return max(ue.RetryAfter, 100*time.Millisecond), true
	case errors.Is(err, routing.ErrUnavailable):
		return time.Second, true
	case errors.As(err, &be):
		return max(be.RetryAfter, 100*time.Millisecond), true
	}
	return 0, false
}

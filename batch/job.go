package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Embedder embeds a batch of texts, returning one vector per text in order, all of
// the job's dimension. The embed command adapts the router to it.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// ItemError is an Embedder's refusal of one text of a batch (too long, empty, …).
// Index is the text's position in the batch.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return e.Err.Error() }
func (e *ItemError) Unwrap() error { return e.Err }

// Defaults of the zero Job fields.
const (
	DefaultBatchSize = 64
	DefaultInFlight  = 2
	DefaultRetries   = 5
)

// Job is one embedding run. Set the fields, then call Run once.
type Job struct {
	// Input is read to its end, a line at a time.
	Input io.Reader
	// CountItems, when set, counts Input's items for the progress percentage and
	// ETA (OpenFiles.CountItems reads the input file a second time). It runs beside
	// the job; until it returns, and when it fails or is nil (standard input), the
	// progress shows the items done without a total.
	CountItems func(context.Context) (int64, error)
	// Reader says how lines are read.
	Reader ReaderConfig

	// Output is the output file ("-": standard output, JSONL only); Format its format.
	Output string
	// OutputAttrs name the output in log lines as the user knows it (Output may be
	// a .parquet output's work file): key-value pairs; nil means "output", Output.
	OutputAttrs []any
	Format      Format
	// Store, when set, is the output instead of Output: a database, already opened
	// (Store.Open). Each batch's items are looked up in it before they are embedded,
	// and those it holds are skipped; nothing is read back or repaired at the start.
	// Its ids are text, so TextIDs applies.
	Store Store
	// Overwrite starts the output over instead of resuming it.
	Overwrite bool
	// TextIDs compares ids by their text rather than their JSON, as a Parquet id
	// column (a string) holds them: set it when the vectors are for a .parquet
	// output, so that the ids "7" and 7 are refused as one id (issue 28) instead of
	// becoming two rows with the same id.
	TextIDs bool
	// JSONIDs writes a new .npy output's ids file as JSON, one id a line, instead of
	// as plain text: set it for a .parquet output's work file, which must keep every
	// id the job accepts (line breaks, and "7" versus 7 in TextIDs' absence) for the
	// Parquet file. A resumed .npy output keeps the form it was written in.
	JSONIDs bool
	// Dim is the dimension of every vector the Embedder returns.
	Dim int
	// Record, when set, says what makes this job's vectors. A file output's is
	// kept beside it (RecordPath); resuming an output whose Record differs is
	// refused, and one without (written before records were) is resumed with a
	// warning. A Store keeps none.
	Record *JobRecord
	// firstSeen says the reader has read the input's first item (checkFirstText).
	firstSeen bool

	Embedder Embedder
	// BatchSize is the number of texts per Embed call; 0 means DefaultBatchSize.
	BatchSize int
	// InFlight is how many batches are embedded at once; 0 means DefaultInFlight. Two
	// keep the workers busy while the next batch is tokenized.
	InFlight int
	// Retryable says whether an Embed error is transient (a worker restarting) and how
	// long to wait before trying the batch again, at most DefaultRetries times. nil
	// means no error is retried.
	Retryable func(error) (time.Duration, bool)
	// SkipInvalid skips input lines that are not items and texts the Embedder refuses,
	// logging each, instead of stopping the job at the first.
	SkipInvalid bool

	// Progress receives a progress bar when Terminal; otherwise progress goes to
	// Logger as a line every ProgressInterval (0 means 10s).
	Progress         io.Writer
	Terminal         bool
	ProgressInterval time.Duration
	// Logger receives progress lines, skipped items and the summary. nil means
	// slog.Default().
	Logger *slog.Logger
}

// Stats summarises a run.
type Stats struct {
	// Embedded is the number of vectors written by this run.
	Embedded int64
	// Resumed is the number of items skipped because the output already held them.
	Resumed int64
	// Invalid is the number of items skipped as invalid (SkipInvalid).
	Invalid int64
	// Blank is the number of empty input lines.
	Blank int64
	// Dropped is the number of output rows found at the start that the completed run
	// removed: rows repeating an earlier row's id, and rows whose id the input does
	// not hold. The output then holds each input id exactly once.
	Dropped int64
	// Elapsed is the run's duration.
	Elapsed time.Duration
}

// batchWork is one batch on its way through the pipeline.
type batchWork struct {
	items []Item
	// resumed is the number of items the reader had skipped as already written when
	// it sent this batch, so that progress counts every item done, not only this run's;
	// invalid the lines it had skipped as invalid.
	resumed, invalid int64
	done             chan batchResult // buffered 1: the embedder never waits for the writer
}

type batchResult struct {
	// items are the batch's items that were embedded (SkipInvalid leaves some out),
	// ids their ids and vecs their vectors.
	items   []Item
	ids     []json.RawMessage
	vecs    [][]float32
	invalid int64
	err     error
}

// Run embeds every item of Input not yet in Output and writes the vectors in input
// order. On error or cancellation everything already written stays valid and a rerun
// resumes after it.
func (j *Job) Run(parent context.Context) (Stats, error) {
	start := time.Now()
	log := j.Logger
	if log == nil {
		log = slog.Default()
	}
	if j.Dim <= 0 {
		return Stats{}, errors.New("batch: Job.Dim must be set")
	}
	idx := newIDIndex()
	// Plain ids in a .npy output are text: "7" and 7 would be one id there.
	idx.text = j.TextIDs || j.Store != nil || (j.Format == FormatNPY && !j.JSONIDs)
	out := &output{stream: true}
	if j.Store == nil {
		form := idsText
		if j.JSONIDs {
			form = idsJSON
		}
		var err error
		if out, err = openOutput(j.Output, j.Format, j.Dim, j.Reader.maxLine(), j.Overwrite, idx, form); err != nil {
			return Stats{}, err
		}
	}
	named := j.OutputAttrs
	if named == nil {
		named = []any{"output", j.Output}
	}
	if j.Record != nil && j.Store == nil && !out.stream {
		if err := j.keepRecord(out.rows, log, named); err != nil {
			out.sink.close()
			return Stats{}, err
		}
	}
	if out.rows > 0 {
		log.Info("resuming: the output already holds vectors; their items are skipped", append(named[:len(named):len(named)], "records", out.rows)...)
	}
	if n := len(idx.dupRows); n > 0 {
		log.Warn("the output holds rows that repeat an earlier row's id; they are dropped when the run completes",
			append(named[:len(named):len(named)], "rows", n, "first_row", idx.dupRows[0]+1, "id", string(idx.firstDup))...)
	}
	batchSize, inFlight := j.BatchSize, j.InFlight
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	if inFlight <= 0 {
		inFlight = DefaultInFlight
	}

	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	var (
		stats Stats // the writer's (this goroutine's)
		// readStats is the reader goroutine's, read after wg.Wait.
		readStats Stats
		wg        sync.WaitGroup
		work      = make(chan *batchWork)
		order     = make(chan *batchWork, inFlight)
		reader    = NewReader(j.Input, j.Reader)
	)
	// The reader fills batches, leaving out what the output already holds; the
	// order channel's capacity bounds the batches in memory.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(work)
		defer close(order)
		if err := j.read(ctx, reader, idx, batchSize, out.rows, &readStats, log, work, order, j.Format == FormatNPY && out.form == idsText); err != nil {
			cancel(err)
		}
	}()
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				b.done <- j.embed(ctx, b.items, log)
			}
		}()
	}

	// total is the input's items once counted, -1 until then.
	var total atomic.Int64
	total.Store(-1)
	if j.CountItems != nil {
		go func() {
			if n, err := j.CountItems(ctx); err == nil {
				total.Store(n)
			} else if ctx.Err() == nil {
				log.Warn("the progress shows no percentage: the input's items could not be counted", "error", err.Error())
			}
		}()
	}
	prog := newProgress(j, log, total.Load)
	for b := range order {
		var res batchResult
		select {
		case res = <-b.done:
		case <-ctx.Done():
			res.err = context.Cause(ctx)
		}
		if res.err != nil {
			cancel(res.err)
			break
		}
		if err := j.write(ctx, out, res); err != nil {
			cancel(err)
			break
		}
		stats.Embedded += int64(len(res.vecs))
		stats.Invalid += res.invalid
		prog.update(count{done: b.resumed + stats.Embedded, embedded: stats.Embedded, skipped: b.invalid + stats.Invalid})
	}
	// The first error, if any, is the cause; a cancelled parent is an interruption.
	var runErr error
	if cause := context.Cause(ctx); cause != nil {
		runErr = cause
	}
	cancel(nil)
	if runErr == nil && parent.Err() != nil {
		runErr = context.Cause(parent)
	}
	// Drain so the reader and embedders can finish, then wait for them.
	go func() {
		for range order {
		}
	}()
	wg.Wait()
	prog.finish(count{done: readStats.Resumed + stats.Embedded, embedded: stats.Embedded, skipped: readStats.Invalid + stats.Invalid}, runErr == nil)

	stats.Resumed, stats.Invalid = readStats.Resumed, stats.Invalid+readStats.Invalid
	stats.Blank = reader.Blank()
	var closeErr error
	if out.sink != nil {
		closeErr = out.sink.close()
	}
	if err := closeErr; err != nil || runErr != nil {
		stats.Elapsed = time.Since(start)
		return stats, errors.Join(runErr, err)
	}
	// The whole input is read: rows it does not hold, and repeated rows, can go.
	if drop, foreign := idx.dropRows(); len(drop) > 0 && !out.stream {
		first, err := repairOutput(j.Output, j.Format, j.Dim, j.Reader.maxLine(), drop)
		if err != nil {
			stats.Elapsed = time.Since(start)
			return stats, err
		}
		stats.Dropped = int64(len(drop))
		log.Warn("repaired the output: dropped rows that repeated an earlier row's id or whose id the input does not hold",
			append(named[:len(named):len(named)], "repeated", int64(len(drop))-foreign, "not_in_input", foreign, "first_dropped_id", string(first))...)
	}
	stats.Elapsed = time.Since(start)
	return stats, nil
}

// checkFirstText compares the input's first item with the text the output's first
// row was made from (JobRecord.FirstText) when the output holds rows, and records
// it in a new output's JobRecord. Items after the first pass untouched.
func (j *Job) checkFirstText(it Item, held int64) error {
	if j.Record == nil || j.Store != nil || j.firstSeen {
		return nil
	}
	j.firstSeen = true
	d := textDigest(it.Text)
	switch {
	case held > 0 && j.Record.FirstText != "" && j.Record.FirstText != d:
		return fmt.Errorf("the input's first item (line %d) is not the text the output's first row was made from: the output was made from another input. Check --input, or pass --overwrite to start the output over", it.Line)
	case j.Record.FirstText == d:
		return nil
	case held == 0 || j.Record.FirstText == "":
		j.Record.FirstText = d
		if err := WriteRecord(RecordPath(j.Output), j.Record); err != nil {
			return fmt.Errorf("write the job record: %w", err)
		}
	}
	return nil
}

// foreignCheck bounds the items read before a resumed output must have shown one
// of its ids (read).
const foreignCheck = 1000

// read is the reader stage: items not in the output, in batches, to both channels.
// plainIDs refuses ids with a line break, which a .npy output's plain ids cannot hold.
//
// A resumed output (held rows from before) holds the first items of its input,
// which a run writes in input order. So until an item the output holds turns up,
// new items are held back, not embedded: an input whose first min(held,
// foreignCheck) items are all new is not the output's (a mistyped --input), and
// going on would embed all of it, then drop every earlier row as not in the input.
func (j *Job) read(ctx context.Context, r *Reader, idx *idIndex, size int, held int64, stats *Stats, log *slog.Logger, work, order chan<- *batchWork, plainIDs bool) error {
	var items []Item
	checking, firstLine := held > 0, int64(0)
	foreign := func() error {
		return fmt.Errorf("the output holds %d rows from an earlier run, and none of the input's first %d items (lines %d to %d) is among them: it was not made from this input. Check --input, or pass --overwrite to start the output over",
			held, len(items), firstLine, items[len(items)-1].Line)
	}
	send := func(n int) error {
		if n == 0 {
			return nil
		}
		batch := items[:n:n]
		items = items[n:]
		if j.Store != nil && !j.Overwrite {
			var err error
			if batch, err = j.notStored(ctx, batch, stats); err != nil {
				return err
			}
			if len(batch) == 0 {
				return nil
			}
		}
		b := &batchWork{items: batch, resumed: stats.Resumed, invalid: stats.Invalid, done: make(chan batchResult, 1)}
		select {
		case order <- b:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		select {
		case work <- b:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		it, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		written := false
		if err == nil {
			written, err = idx.see(it.ID, it.Line)
		}
		if err == nil && !written && plainIDs && bytes.ContainsAny(jsonText(it.ID), "\r\n") {
			err = &LineError{Line: it.Line, Msg: fmt.Sprintf("has the id %s, which holds a line break: a .npy output's ids file holds one id a line, as text; choose a .jsonl or .parquet --output for such ids", it.ID)}
		}
		var le *LineError
		if errors.As(err, &le) {
			if !j.SkipInvalid {
				return fmt.Errorf("%w (fix the input, or pass --skip-invalid to skip such lines)", le)
			}
			log.Warn("skipping an invalid input line", "line", le.Line, "reason", le.Msg)
			stats.Invalid++
			continue
		}
		if err != nil {
			return err
		}
		if err := j.checkFirstText(it, held); err != nil {
			return err
		}
		if written {
			stats.Resumed++
			checking = false
		} else {
			if len(items) == 0 {
				firstLine = it.Line
			}
			items = append(items, it)
			if checking && int64(len(items)) >= min(held, foreignCheck) {
				return foreign()
			}
		}
		for !checking && len(items) >= size {
			if err := send(size); err != nil {
				return err
			}
		}
	}
	if checking && len(items) > 0 {
		return foreign()
	}
	for len(items) > 0 {
		if err := send(min(size, len(items))); err != nil {
			return err
		}
	}
	return nil
}

// embed embeds one batch, retrying transient failures and, with SkipInvalid, leaving
// out the texts the Embedder refuses.
func (j *Job) embed(ctx context.Context, items []Item, log *slog.Logger) batchResult {
	var res batchResult
	retries := 0
	for len(items) > 0 {
		texts := make([]string, len(items))
		for i, it := range items {
			texts[i] = it.Text
		}
		vecs, err := j.Embedder.Embed(ctx, texts)
		if err == nil {
			if len(vecs) != len(items) {
				res.err = fmt.Errorf("the embedder returned %d vectors for %d texts", len(vecs), len(items))
				return res
			}
			res.ids = make([]json.RawMessage, len(items))
			for i, it := range items {
				res.ids[i] = it.ID
			}
			res.items, res.vecs = items, vecs
			return res
		}
		if ctx.Err() != nil {
			res.err = context.Cause(ctx)
			return res
		}
		var ie *ItemError
		if errors.As(err, &ie) && ie.Index >= 0 && ie.Index < len(items) {
			bad := items[ie.Index]
			if !j.SkipInvalid {
				res.err = fmt.Errorf("input line %d (id %s): %w (fix the input, or pass --skip-invalid to skip such items)", bad.Line, bad.ID, ie.Err)
				return res
			}
			log.Warn("skipping an item the model refuses", "id", string(bad.ID), "line", bad.Line, "reason", ie.Err.Error())
			res.invalid++
			items = append(items[:ie.Index:ie.Index], items[ie.Index+1:]...)
			continue
		}
		if wait, ok := j.retryable(err); ok && retries < DefaultRetries {
			retries++
			log.Warn("embedding failed; retrying the batch", "attempt", retries, "wait", wait, "error", err.Error())
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				res.err = context.Cause(ctx)
				return res
			}
			continue
		}
		res.err = fmt.Errorf("embed the batch starting at input line %d: %w", items[0].Line, err)
		return res
	}
	return res
}

// notStored returns the items of a batch that the Store does not hold yet, counting
// the others as resumed.
func (j *Job) notStored(ctx context.Context, items []Item, stats *Stats) ([]Item, error) {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = IDText(it.ID)
	}
	held, err := j.Store.Has(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("resume: look up input lines %d-%d: %w", items[0].Line, items[len(items)-1].Line, err)
	}
	if len(held) != len(items) {
		return nil, fmt.Errorf("resume: %s answered %d lookups for %d ids", j.Store, len(held), len(items))
	}
	kept := items[:0]
	for i, it := range items {
		if held[i] {
			stats.Resumed++
			continue
		}
		kept = append(kept, it)
	}
	return kept, nil
}

// write hands one embedded batch to the output: the file's sink, or the Store.
func (j *Job) write(ctx context.Context, out *output, res batchResult) error {
	if j.Store == nil {
		return out.sink.write(res.ids, res.vecs)
	}
	if len(res.items) == 0 {
		return nil
	}
	recs := make([]Record, len(res.items))
	for i, it := range res.items {
		if len(res.vecs[i]) != j.Dim {
			return fmt.Errorf("vector for id %s has %d dimensions, want %d", it.ID, len(res.vecs[i]), j.Dim)
		}
		recs[i] = Record{ID: IDText(it.ID), Item: it, Vector: res.vecs[i]}
	}
	if err := j.Store.Write(ctx, recs); err != nil {
		first, last := res.items[0].Line, res.items[len(res.items)-1].Line
		return fmt.Errorf("write input lines %d-%d: %w; what was written before is kept, and the same command resumes after it", first, last, err)
	}
	return nil
}

func (j *Job) retryable(err error) (time.Duration, bool) {
	if j.Retryable == nil {
		return 0, false
	}
	return j.Retryable(err)
}

// keepRecord compares the JobRecord kept beside the output with the job's when the
// output holds rows (a resume), refusing another job's, and writes the job's.
func (j *Job) keepRecord(rows int64, log *slog.Logger, named []any) error {
	path := RecordPath(j.Output)
	old, err := ReadRecord(path)
	if err != nil {
		return fmt.Errorf("resume %s: %w; pass --overwrite to start it over, or choose another --output", j.Output, err)
	}
	if rows > 0 {
		if old == nil {
			log.Warn("the output has no job record (written by an older embed-stack): its vectors cannot be checked against this job's model and settings",
				append(named[:len(named):len(named)], "record", path)...)
		} else if diffs := j.Record.Differences(old); len(diffs) > 0 {
			return fmt.Errorf("resume %s: %w; pass --overwrite to start it over, or choose another --output", j.Output, anotherJob("it", diffs))
		}
	}
	if rows > 0 && old != nil {
		j.Record.FirstText = old.FirstText // read checks the input against it
	}
	if old != nil && *old == *j.Record {
		return nil
	}
	if err := WriteRecord(path, j.Record); err != nil {
		return fmt.Errorf("write the job record: %w", err)
	}
	return nil
}

package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"time"
)

// FormatParquet is a Parquet file (see parquetSink), written by Merge only: an embed
// run with a .parquet output keeps its vectors in WorkPath's .npy until it completes,
// then merges that one part.
const FormatParquet Format = 2

// WorkPath is where a job writing path keeps its resumable vectors: path itself for
// JSONL and .npy, path+".npy" (and its .ids) for Parquet.
func WorkPath(path string) string {
	if FormatFor(path) == FormatParquet {
		return path + ".npy"
	}
	return path
}

// Merge writes the parts of a sharded job (or the one part of a Parquet job) as one
// output holding every input item's vector exactly once, in input order. Part i
// must be the output of shard i of len(Parts) over the same input (a single part is
// the whole input). Set the fields, then call Run once.
type Merge struct {
	// Input is the job's input file, of InputSize bytes, read as Reader says.
	Input     io.ReaderAt
	InputSize int64
	Reader    ReaderConfig
	// Parts are the parts' paths, shard 0 first, all JSONL or all .npy (with .ids).
	Parts []string
	// Output is written to Output+".merging" (and its .ids), then renamed into place,
	// so a reader never sees half an output.
	Output string
	Format Format
	// Passthrough names input fields copied into each row (Parquet only).
	Passthrough []string
	// AllowMissing merges anyway when input items have no vector (texts the model
	// refused under --skip-invalid); otherwise a missing vector fails the merge.
	AllowMissing bool
	// Overwrite replaces an existing Output that does not read as an output of this
	// package; without it such a file is refused, never replaced.
	Overwrite bool
	// Shards says the parts are a sharded job's (`embed-stack merge`); false, the one
	// part is a .parquet job's work file, which the summary does not mention.
	Shards bool
	// Record, when set, is what the parts must have been made by (an embed run's
	// own .parquet output); without it the parts' Records must agree with each
	// other. The output keeps the Record (beside it, or in a Parquet file's
	// metadata).
	Record *JobRecord
	// Logger receives the summary; nil means slog.Default().
	Logger *slog.Logger
}

// MergeStats summarises a merge.
type MergeStats struct {
	Rows    int64 // written
	Missing int64 // input items without a vector (AllowMissing)
	Invalid int64 // input lines that are not items (no vector expected)
	Dim     int
	Elapsed time.Duration
}

// Run merges. It refuses, writing nothing, when a part is missing or unreadable,
// when an item has no vector (unless AllowMissing), and when a part holds a row whose
// id is not the next item of its slice: a repeated row, a row out of order, or an id
// the slice does not hold.
func (m *Merge) Run(ctx context.Context) (MergeStats, error) {
	start := time.Now()
	log := m.Logger
	if log == nil {
		log = slog.Default()
	}
	var st MergeStats
	if len(m.Parts) == 0 {
		return st, errors.New("merge: no parts")
	}
	if err := m.checkFiles(); err != nil {
		return st, err
	}
	parts := make([]*partReader, len(m.Parts))
	defer func() {
		for _, p := range parts {
			if p != nil {
				p.close()
			}
		}
	}()
	for i, path := range m.Parts {
		p, err := openPart(path, m.Reader.maxLine())
		if err != nil {
			return st, fmt.Errorf("part %d of %d: %w", i, len(m.Parts), err)
		}
		parts[i] = p
		if i == 0 {
			st.Dim = p.dim
		} else if p.dim != st.Dim && p.dim != 0 {
			return st, fmt.Errorf("part %s holds %d-dimensional vectors, part %s %d", path, p.dim, m.Parts[0], st.Dim)
		}
		if st.Dim == 0 {
			st.Dim = p.dim
		}
	}
	if len(m.Passthrough) > 0 && (m.Format != FormatParquet || m.Reader.Format != JSONL) {
		return st, errors.New("passthrough fields need JSONL input and Parquet output")
	}
	rec, err := m.partsRecord(log)
	if err != nil {
		return st, err
	}

	tmp := m.Output + ".merging"
	sink, err := newMergeSink(tmp, m.Format, st.Dim, m.Passthrough, rec)
	if err != nil {
		return st, err
	}
	ok := false
	defer func() {
		if !ok {
			sink.abort()
		}
	}()

	if err := m.walk(ctx, parts, &st, sink); err != nil {
		return st, err
	}
	if err := sink.commit(m.Output); err != nil {
		return st, err
	}
	if m.Format != FormatParquet {
		if rec == nil {
			err = removeIfExists(RecordPath(m.Output)) // an earlier output's
		} else {
			err = WriteRecord(RecordPath(m.Output), rec)
		}
		if err != nil {
			return st, fmt.Errorf("write the job record: %w", err)
		}
	}
	ok = true
	st.Elapsed = time.Since(start)
	msg, attrs := "wrote the output", []any{"output", m.Output, "rows", st.Rows}
	if m.Shards {
		msg, attrs = "merged the shards' parts", append(attrs, "shards", len(m.Parts))
	}
	log.Info(msg, append(attrs, "missing", st.Missing, "invalid_lines", st.Invalid, "seconds", round1(st.Elapsed.Seconds()))...)
	return st, nil
}

// walk reads the input once, slice by slice, and hands each item's row of its part
// to sink (nil: only check), in input order. It fails when a part holds a row that
// is not the next item of its slice, when an id has rows in two parts, and (unless
// AllowMissing) when an item has no row.
func (m *Merge) walk(ctx context.Context, parts []*partReader, st *MergeStats, sink *mergeSink) error {
	idx := newIDIndex()
	// A Parquet id column and a .npy output's plain ids hold ids as text.
	idx.text = m.Format == FormatParquet || m.Format == FormatNPY
	var firstMissing string
	n := len(parts)
	line := int64(1)
	for i, part := range parts {
		shard := Shard{Index: i, Count: n}
		if n == 1 {
			shard = Shard{}
		}
		si, err := OpenShard(m.Input, m.InputSize, shard)
		if err != nil {
			return err
		}
		cfg := m.Reader
		cfg.FirstLine, cfg.Fields = line, m.Passthrough
		r := NewReader(si.Reader(m.Input), cfg)
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			it, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err == nil {
				_, err = idx.see(it.ID, it.Line)
			}
			var le *LineError
			if errors.As(err, &le) {
				if le.Repeats > 0 && part.ok && part.matches(it.ID) {
					// A shard refuses (or skips) an id its own slice repeats, so a
					// row for the repeat means the first is in another slice: no
					// shard could see both lines (issue 28).
					if n == 1 {
						return fmt.Errorf("%s, and %s holds a row for both: it is not an output of this input", le.Error(), part.path)
					}
					return fmt.Errorf("%s; the shards embedded both lines, since each reads only its slice of the input. Give every item its own id, then run every shard again with --overwrite (the slices move when the input changes)", le.Error())
				}
				st.Invalid++ // the job stopped at it or skipped it: no vector
				continue
			}
			if err != nil {
				return err
			}
			if !part.ok || !part.matches(it.ID) {
				if st.Missing == 0 {
					firstMissing = fmt.Sprintf("line %d (id %s)", it.Line, it.ID)
				}
				st.Missing++
				continue
			}
			if sink != nil {
				if err := sink.add(part.id, part.vec, it.Fields); err != nil {
					return err
				}
			}
			st.Rows++
			if err := part.advance(); err != nil {
				return err
			}
		}
		if part.ok {
			return fmt.Errorf("part %s: row %d has the id %s, which is not the next item of its slice of the input (lines %d to %d): a repeated row, a row out of order, or not this input's (was the input changed after the shards ran?); rerun that shard with --overwrite, or every shard if the input changed",
				part.path, part.row+1, part.id, line, r.Line())
		}
		line = r.Line() + 1
	}
	if st.Missing > 0 && !m.AllowMissing {
		return &missingError{n: st.Missing, first: firstMissing}
	}
	return nil
}

// missingError is input items without a vector, first naming the first of them.
type missingError struct {
	n     int64
	first string
}

func (e *missingError) Error() string {
	return fmt.Sprintf("%d input items have no vector in the parts, the first on %s: rerun the shards to complete them, or pass --allow-missing if the job skipped them (--skip-invalid)", e.n, e.first)
}

// Verify checks, writing nothing, that Output is a Parquet file holding what a merge
// would write: every input item's row once, in input order (items without a row only
// with AllowMissing). A finished .parquet job that is run again calls it, and does
// nothing more when it passes, as a finished .npy or JSONL job does (issue 28: it
// embedded the whole input again).
func (m *Merge) Verify(ctx context.Context) (MergeStats, error) {
	var st MergeStats
	p, err := openParquetPart(m.Output)
	if err != nil {
		return st, err
	}
	defer p.close()
	m.Format = FormatParquet
	err = m.walk(ctx, []*partReader{p}, &st, nil)
	return st, err
}

// Finished says whether a .parquet job's Output is already complete: it exists, no
// run is under way (its work file, WorkPath, does not exist) and Verify passes. A
// run that finds it so does nothing. An Output that exists without a work file but
// fails Verify is an error: a Parquet file cannot be appended to or resumed.
func (m *Merge) Finished(ctx context.Context) (bool, MergeStats, error) {
	if _, err := os.Stat(m.Output); err != nil {
		return false, MergeStats{}, nil
	}
	if _, err := os.Stat(WorkPath(m.Output)); err == nil {
		return false, MergeStats{}, nil
	}
	if m.Record != nil {
		old, err := partRecord(m.Output)
		if err != nil {
			return false, MergeStats{}, fmt.Errorf("%s: %w", m.Output, err)
		}
		if old != nil {
			if diffs := m.Record.Differences(old); len(diffs) > 0 {
				return false, MergeStats{}, fmt.Errorf("%w; pass --overwrite to embed the input again, or choose another --output", anotherJob(m.Output, diffs))
			}
		}
	}
	if fields, err := parquetFields(m.Output); err == nil && !sameFields(fields, m.Passthrough) {
		return false, MergeStats{}, fmt.Errorf("%s holds the pass-through columns %q, and this run asks for %q; a Parquet file cannot be resumed: pass --overwrite to embed the input again with them, or choose another --output", m.Output, fields, m.Passthrough)
	}
	st, err := m.Verify(ctx)
	var me *missingError
	if errors.As(err, &me) {
		// In a run's own words: the input gained items since, or the run skipped
		// them as invalid (--skip-invalid, which AllowMissing mirrors).
		err = fmt.Errorf("%d input items have no row in it, the first on %s (items added to the input since, or skipped as invalid by a run with --skip-invalid, which accepts that when given again)", me.n, me.first)
	}
	if err != nil {
		return false, st, fmt.Errorf("%s exists but does not hold this input's vectors: %w; a Parquet file cannot be resumed: pass --overwrite to embed the input again, or choose another --output", m.Output, err)
	}
	return true, st, nil
}

// checkFiles refuses a merge that would destroy a file it did not write: an output
// that is the input or one of the parts (by device and inode, or resolved path),
// parts that are one file, an output that is not a regular file, and an existing
// output that is not an output of this package (unless Overwrite).
func (m *Merge) checkFiles() error {
	var input fs.FileInfo
	if f, ok := m.Input.(interface{ Stat() (fs.FileInfo, error) }); ok {
		input, _ = f.Stat()
	}
	files, err := refsOf("the output", m.Output, m.Format)
	if err != nil {
		return err
	}
	if fi := files[0].fi; fi != nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("--output %s is not a regular file (%s): a merge writes a temporary file and renames it into place; give a file name", m.Output, fi.Mode().Type())
	}
	tmp, err := refsOf("the output's temporary copy", m.Output+".merging", m.Format)
	if err != nil {
		return err
	}
	files = append(files, tmp...)
	for i, p := range m.Parts {
		refs, err := refsOf(fmt.Sprintf("part %d", i), p, FormatFor(p))
		if err != nil {
			return err
		}
		files = append(files, refs...)
	}
	if err := checkDistinct(input, "--input", files); err != nil {
		return err
	}
	if files[0].fi == nil || m.Overwrite {
		return nil
	}
	if err := isOurOutput(m.Output, m.Format); err != nil {
		return fmt.Errorf("--output %s exists and is not an output of embed-stack (%v): a merge would replace it; pass --overwrite to replace it, or choose another --output", m.Output, err)
	}
	return nil
}

// isOurOutput says (nil) whether path reads as an output this package writes, by its
// start: a .npy header as npyHeader writes it, a Parquet file with the id and
// embedding columns, or JSONL whose first line starts as a record (an empty file
// passes: there is nothing to lose).
func isOurOutput(path string, format Format) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	switch format {
	case FormatNPY:
		h := make([]byte, npyHeaderLen)
		if _, err := io.ReadFull(f, h); err != nil {
			return fmt.Errorf("read .npy header: %w", err)
		}
		_, _, err := parseNPYHeader(h)
		return err
	case FormatParquet:
		p, err := openParquetPart(path)
		if err != nil {
			return err
		}
		p.close()
		return nil
	}
	head := make([]byte, 256)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return err
	}
	head = head[:n]
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	if n > 0 && !isRecordPrefix(head) {
		return fmt.Errorf("its first line begins %s", quoteStart(head, 40))
	}
	return nil
}

// partsRecord returns the JobRecord the output keeps: Merge.Record, or the parts'
// when they agree. A part made by another job than Merge.Record, or than the
// first part with a Record, is refused; parts without one (written before
// records were) are merged with a warning.
func (m *Merge) partsRecord(log *slog.Logger) (*JobRecord, error) {
	rec, from := m.Record, ""
	for _, path := range m.Parts {
		r, err := partRecord(path)
		if err != nil {
			return nil, fmt.Errorf("part %s: %w", path, err)
		}
		switch {
		case r == nil:
			if m.Shards {
				log.Warn("the part has no job record (written by an older embed-stack): its vectors cannot be checked against the other parts'", "part", path)
			}
		case rec == nil:
			c := *r
			c.FirstText = "" // a part's first item is not the input's, unless it is part 0
			rec, from = &c, path
		default:
			if diffs := rec.Differences(r); len(diffs) > 0 {
				what := "this job"
				if from != "" {
					what = "part " + from
				}
				return nil, fmt.Errorf("%w; the parts must come from one job: embed them again with its settings (--overwrite)", anotherJob(fmt.Sprintf("part %s (against %s)", path, what), diffs))
			}
		}
	}
	return rec, nil
}

package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Files are a job's input and output as `embed-stack embed` names them: Input "-"
// is standard input; a shard reads its byte range of the input and writes its own
// part (ShardPath), for Merge to join; a .parquet output is written from a work file
// (WorkPath) once that holds every vector, since a Parquet file cannot be appended
// to. Open opens them, refusing what CheckFiles refuses; the job writes
// OpenFiles.Work; Finish writes a .parquet output.
type Files struct {
	// Input is the input file, "-" for standard input. Output is the output as
	// given, before a shard's suffix.
	Input, Output string
	// Shard is the slice of the input this run embeds (Count 0: all of it).
	Shard Shard
	// Remote says Output names a Store (a database's URL), not a file: no output
	// file is checked or named, and every shard writes to the one Store.
	Remote bool
	// Overwrite starts the output over instead of resuming it.
	Overwrite bool
	// Reader says how the input is read; Open sets its FirstLine for a shard.
	Reader ReaderConfig
	// Passthrough names JSONL fields copied into a .parquet output, and
	// AllowMissing lets that output lack the items skipped as invalid.
	Passthrough  []string
	AllowMissing bool
	// Logger receives the shard's extent and the notes of Finished and Finish;
	// nil means slog.Default().
	Logger *slog.Logger
}

// OpenFiles are a job's opened input and the paths it writes.
type OpenFiles struct {
	// In is the input (a shard's byte range of it), Size its length in bytes (0
	// when unknown: standard input that is not a file), and Reader how to read it.
	In     io.Reader
	Size   int64
	Reader ReaderConfig
	// Output is what the user gets (for a shard, its part); Work is what the job
	// writes: Output, or for a .parquet output its work file.
	Output, Work string

	files Files
	file  *os.File // the input file; nil for standard input
	// start is where the input (a shard's slice) begins in the file.
	start   int64
	parquet *Merge // writes a .parquet Output from Work
}

// Open opens the input, checks the files the run writes (CheckFiles) and names the
// job's output. Shards and .parquet outputs need an input file: they read it by
// offset.
func (f Files) Open() (*OpenFiles, error) {
	if f.Logger == nil {
		f.Logger = slog.Default()
	}
	o := &OpenFiles{In: os.Stdin, Reader: f.Reader, files: f}
	o.Reader.FirstLine = 1
	inName := "standard input"
	inInfo, _ := os.Stdin.Stat() // a file redirected to standard input is checked too
	if f.Input != "-" {
		file, err := os.Open(f.Input)
		if err != nil {
			return nil, fmt.Errorf("--input: %w", err)
		}
		o.file, o.In = file, file
		fi, err := file.Stat()
		inName, inInfo = f.Input, fi
		if err == nil && fi.Mode().IsRegular() {
			o.Size = fi.Size()
		} else if f.Shard.Count > 0 || FormatFor(f.Output) == FormatParquet {
			file.Close()
			return nil, fmt.Errorf("--input %s: not a regular file, which --shard and .parquet need (they read it by offset)", f.Input)
		}
		if f.Shard.Count > 0 {
			si, err := OpenShard(file, o.Size, f.Shard)
			if err != nil {
				file.Close()
				return nil, fmt.Errorf("--input: %w", err)
			}
			o.In, o.Size, o.Reader.FirstLine, o.start = si.Reader(file), si.End-si.Start, si.FirstLine, si.Start
			f.Logger.Info("shard", "shard", f.Shard.String(), "first_line", si.FirstLine, "bytes", o.Size, "input_offset", si.Start)
		}
	}
	if f.Remote {
		o.Output, o.Work = f.Output, f.Output
		return o, nil
	}
	if err := CheckFiles(inInfo, inName, f.Output, f.Shard, f.Overwrite); err != nil {
		o.Close()
		return nil, err
	}
	o.Output = f.Output
	if f.Shard.Count > 0 {
		o.Output = ShardPath(o.Output, f.Shard)
	}
	o.Work = WorkPath(o.Output)
	reader := f.Reader
	reader.FirstLine = 0
	o.parquet = &Merge{Input: o.file, InputSize: o.Size, Reader: reader, Parts: []string{o.Work}, Output: o.Output,
		Format: FormatParquet, Passthrough: f.Passthrough, AllowMissing: f.AllowMissing, Overwrite: f.Overwrite, Logger: f.Logger}
	return o, nil
}

// Finished says a .parquet output already holds every item of the input
// (Merge.Finished), and logs it: the run has nothing to do.
func (o *OpenFiles) Finished(ctx context.Context) (bool, error) {
	if o.Work == o.Output || o.files.Shard.Count > 0 || o.files.Overwrite {
		return false, nil
	}
	done, st, err := o.parquet.Finished(ctx)
	if done {
		o.files.Logger.Info("the output already holds every item; nothing to do", "output", o.Output, "rows", st.Rows, "missing", st.Missing)
	}
	return done, err
}

// Finish completes the output once the job is done: a .parquet output is written
// from the work file, which is then removed; a shard's part waits for Merge; a
// Store is complete already.
func (o *OpenFiles) Finish(ctx context.Context) error {
	switch {
	case o.Work == o.Output:
		return nil
	case o.files.Shard.Count > 0:
		o.files.Logger.Info("the shard's vectors are ready; once every shard is done, embed-stack merge writes the .parquet", "part", o.Work)
		return nil
	}
	if _, err := o.parquet.Run(ctx); err != nil {
		return err
	}
	return errors.Join(os.Remove(o.Work), os.Remove(IDsPath(o.Work)), removeIfExists(RecordPath(o.Work)))
}

// SetRecord gives the .parquet output the job's JobRecord: Finished compares an
// existing output's with it, and Finish writes it into the output.
func (o *OpenFiles) SetRecord(r *JobRecord) {
	if o.parquet != nil {
		o.parquet.Record = r
	}
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// CountItems counts the items of the input (a shard's slice of it) for the progress,
// reading the file a second time, sequentially,
// beside the model's loading and the job (CountItems). nil when the input is no
// regular file (standard input), which cannot be read twice. It reads by offset
// (pread), which leaves the job's own reading of the file where it is.
func (o *OpenFiles) CountItems() func(context.Context) (int64, error) {
	if o.file == nil || o.Size <= 0 {
		return nil
	}
	f, start, size, format := o.file, o.start, o.Size, o.Reader.Format
	return func(ctx context.Context) (int64, error) {
		return CountItems(ctx, io.NewSectionReader(f, start, size), format)
	}
}

// Close closes the input file.
func (o *OpenFiles) Close() error {
	if o.file == nil {
		return nil
	}
	return o.file.Close()
}

// ResolveShard is the slice a run embeds, from --shard i/N, or from --shards N with
// the index a Kubernetes Indexed Job puts in JOB_COMPLETION_INDEX (jobIndex).
func ResolveShard(spec string, count int, jobIndex string) (Shard, error) {
	switch {
	case spec != "":
		sh, err := ParseShard(spec)
		if err != nil {
			return sh, fmt.Errorf("--shard: %w", err)
		}
		if count != 0 && count != sh.Count {
			return sh, fmt.Errorf("--shard %s and --shards %d disagree", spec, count)
		}
		return sh, nil
	case count < 0:
		return Shard{}, errors.New("--shards must not be negative")
	case count > 0:
		if jobIndex == "" {
			return Shard{}, fmt.Errorf("--shards %d needs this run's index: set --shard i/%d, or JOB_COMPLETION_INDEX (a Kubernetes Indexed Job sets it)", count, count)
		}
		sh, err := ParseShard(jobIndex + "/" + strconv.Itoa(count))
		if err != nil {
			return sh, fmt.Errorf("JOB_COMPLETION_INDEX=%q with --shards %d: %w", jobIndex, count, err)
		}
		return sh, nil
	}
	return Shard{}, nil
}

// ParseInputFormat reads --input-format: lines, jsonl, or auto, which is jsonl for
// an input named .jsonl or .ndjson.
func ParseInputFormat(name, input string) (InputFormat, error) {
	switch strings.ToLower(name) {
	case "lines":
		return Lines, nil
	case "jsonl":
		return JSONL, nil
	case "auto":
		switch strings.ToLower(filepath.Ext(input)) {
		case ".jsonl", ".ndjson":
			return JSONL, nil
		}
		return Lines, nil
	}
	return 0, fmt.Errorf("--input-format %q: use lines, jsonl or auto", name)
}

package batch

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Format is the output's format.
type Format int

const (
	// FormatJSONL writes one {"id":…,"embedding":[…]} object per line.
	FormatJSONL Format = iota
	// FormatNPY writes a float32 .npy array plus a FILE.ids sidecar of ids.
	FormatNPY
)

func (f Format) String() string {
	switch f {
	case FormatNPY:
		return "npy"
	case FormatParquet:
		return "parquet"
	}
	return "jsonl"
}

// FormatFor picks the format from a file name: .npy is NPY, .parquet Parquet,
// anything else JSONL.
func FormatFor(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".npy":
		return FormatNPY
	case ".parquet":
		return FormatParquet
	}
	return FormatJSONL
}

// IDsPath is the sidecar holding the ids of a .npy output's rows, one JSON value a
// line: row i is line i+1.
func IDsPath(npyPath string) string { return npyPath + ".ids" }

// sink receives the vectors in order. write appends one batch and flushes it to the
// operating system, so that what a killed job leaves is the vectors of whole batches
// plus at most one partly written record, which a resume truncates.
type sink interface {
	write(ids []json.RawMessage, vecs [][]float32) error
	close() error
}

// ---------------------------------------------------------------------------
// JSONL.

type jsonlSink struct {
	f   *os.File // nil for standard output, which is not closed
	w   *bufio.Writer
	dim int
	buf []byte
}

func (s *jsonlSink) write(ids []json.RawMessage, vecs [][]float32) error {
	for i, v := range vecs {
		if len(v) != s.dim {
			return fmt.Errorf("vector for id %s has %d dimensions, want %d", ids[i], len(v), s.dim)
		}
		b := append(s.buf[:0], `{"id":`...)
		b = append(b, ids[i]...)
		b = append(b, `,"embedding":[`...)
		for j, x := range v {
			if j > 0 {
				b = append(b, ',')
			}
			// The shortest decimal that parses back to the same float32.
			b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
		}
		b = append(b, "]}\n"...)
		s.buf = b
		if _, err := s.w.Write(b); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

func (s *jsonlSink) close() error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}

// parseJSONLRecord reads a line written by jsonlSink (without its newline): the id as
// written and the number of floats.
func parseJSONLRecord(line []byte) (json.RawMessage, int, error) {
	const head, mid = `{"id":`, `,"embedding":[`
	if !bytes.HasPrefix(line, []byte(head)) || !bytes.HasSuffix(line, []byte("]}")) {
		return nil, 0, errors.New(`not an {"id":…,"embedding":[…]} record`)
	}
	dec := json.NewDecoder(bytes.NewReader(line[len(head):]))
	var id json.RawMessage
	if err := dec.Decode(&id); err != nil {
		return nil, 0, fmt.Errorf("id: %w", err)
	}
	rest := line[len(head)+int(dec.InputOffset()):]
	if !bytes.HasPrefix(rest, []byte(mid)) {
		return nil, 0, errors.New(`no "embedding" after the id`)
	}
	arr := rest[len(mid) : len(rest)-2]
	n := 0
	if len(arr) > 0 {
		n = bytes.Count(arr, []byte(",")) + 1
	}
	return id, n, nil
}

// ---------------------------------------------------------------------------
// .npy.

type npySink struct {
	f, ids *os.File
	w, iw  *bufio.Writer
	dim    int
	rows   int64
	buf    []byte
}

func (s *npySink) write(ids []json.RawMessage, vecs [][]float32) error {
	for i, v := range vecs {
		if len(v) != s.dim {
			return fmt.Errorf("vector for id %s has %d dimensions, want %d", ids[i], len(v), s.dim)
		}
		b := s.buf[:0]
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		s.buf = b
		if _, err := s.w.Write(b); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
		if _, err := s.iw.Write(append(ids[i], '\n')); err != nil {
			return fmt.Errorf("write ids: %w", err)
		}
	}
	// Rows first, then their ids, then the count: whatever a kill interrupts, the
	// header never claims rows that are not on disk, and a resume trusts only the rows
	// that have both vector and id.
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := s.iw.Flush(); err != nil {
		return fmt.Errorf("write ids: %w", err)
	}
	s.rows += int64(len(vecs))
	if _, err := s.f.WriteAt(npyHeader(s.rows, s.dim), 0); err != nil {
		return fmt.Errorf("write .npy header: %w", err)
	}
	return nil
}

func (s *npySink) close() error {
	return errors.Join(s.f.Close(), s.ids.Close())
}

// ---------------------------------------------------------------------------
// Opening, and resuming.

// output is an opened output: its sink and the number of records kept from before.
type output struct {
	sink sink
	rows int64
}

// openOutput opens path ("-" is standard output, JSONL only) for a job making
// dim-dimensional vectors. An existing non-empty output is resumed unless overwrite:
// a partly written last record is cut off, the rest kept, and the id of every kept
// row recorded in idx.
func openOutput(path string, format Format, dim int, overwrite bool, idx *idIndex) (*output, error) {
	if path == "-" {
		if format != FormatJSONL {
			return nil, errors.New("standard output takes JSONL only; give a .npy file name for --output")
		}
		return &output{sink: &jsonlSink{w: bufio.NewWriterSize(os.Stdout, 1<<20), dim: dim}}, nil
	}
	if err := finishRepair(path, format); err != nil {
		return nil, err
	}
	if format == FormatNPY {
		return openNPY(path, dim, overwrite, idx)
	}
	return openJSONL(path, dim, overwrite, idx)
}

func openJSONL(path string, dim int, overwrite bool, idx *idIndex) (*output, error) {
	flags := os.O_RDWR | os.O_CREATE
	if overwrite {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open output: %w", err)
	}
	keep, rows, err := scanJSONL(f, dim, idx)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("resume %s: %w; pass --overwrite to start it over, or choose another --output", path, err)
	}
	if err := f.Truncate(keep); err != nil {
		f.Close()
		return nil, fmt.Errorf("truncate output: %w", err)
	}
	if _, err := f.Seek(keep, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seek output: %w", err)
	}
	return &output{sink: &jsonlSink{f: f, w: bufio.NewWriterSize(f, 1<<20), dim: dim}, rows: rows}, nil
}

// scanJSONL checks every complete record of an existing output, records its id in idx,
// and returns the size of the complete records and their number. Only the last line
// may be incomplete (a kill mid-write); anything else that is not a record of dim
// floats is refused.
func scanJSONL(f *os.File, dim int, idx *idIndex) (keep, rows int64, err error) {
	r := bufio.NewReaderSize(f, 1<<20)
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return keep, rows, nil // an incomplete last line is dropped
		case err != nil:
			return 0, 0, fmt.Errorf("read: %w", err)
		}
		id, n, perr := parseJSONLRecord(line[:len(line)-1])
		if perr != nil {
			return 0, 0, fmt.Errorf("line %d is not a record of this job: %v", rows+1, perr)
		}
		if n != dim {
			return 0, 0, fmt.Errorf("it holds %d-dimensional vectors and this job makes %d", n, dim)
		}
		idx.addRow(rows, id)
		keep += int64(len(line))
		rows++
		line = line[:0]
	}
}

func openNPY(path string, dim int, overwrite bool, idx *idIndex) (*output, error) {
	idsPath := IDsPath(path)
	fi, err := os.Stat(path)
	fresh := overwrite || errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Size() == 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("output: %w", err)
	}
	if fresh {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open output: %w", err)
		}
		ids, err := os.OpenFile(idsPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("open ids: %w", err)
		}
		if _, err := f.Write(npyHeader(0, dim)); err != nil {
			f.Close()
			ids.Close()
			return nil, fmt.Errorf("write .npy header: %w", err)
		}
		return &output{sink: &npySink{f: f, ids: ids, w: bufio.NewWriterSize(f, 1<<20), iw: bufio.NewWriter(ids), dim: dim}}, nil
	}

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open output: %w", err)
	}
	ids, err := os.OpenFile(idsPath, os.O_RDWR, 0)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("resume %s: its ids file: %w; pass --overwrite to start it over", path, err)
	}
	fail := func(err error) (*output, error) {
		f.Close()
		ids.Close()
		return nil, err
	}
	rows, keepIDs, err := scanNPY(f, ids, dim, idx)
	if err != nil {
		return fail(fmt.Errorf("resume %s: %w; pass --overwrite to start it over, or choose another --output", path, err))
	}
	rowBytes := int64(dim) * 4
	if err := f.Truncate(npyHeaderLen + rows*rowBytes); err != nil {
		return fail(fmt.Errorf("truncate output: %w", err))
	}
	if err := ids.Truncate(keepIDs); err != nil {
		return fail(fmt.Errorf("truncate ids: %w", err))
	}
	if _, err := f.WriteAt(npyHeader(rows, dim), 0); err != nil {
		return fail(fmt.Errorf("write .npy header: %w", err))
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return fail(fmt.Errorf("seek output: %w", err))
	}
	if _, err := ids.Seek(0, io.SeekEnd); err != nil {
		return fail(fmt.Errorf("seek ids: %w", err))
	}
	return &output{sink: &npySink{f: f, ids: ids, w: bufio.NewWriterSize(f, 1<<20), iw: bufio.NewWriter(ids), dim: dim, rows: rows}, rows: rows}, nil
}

// scanNPY returns how many rows of an existing .npy output are complete, in the array
// and in the ids file both, and the size of the ids file's first rows lines; it records
// each of those rows' ids in idx.
func scanNPY(f, ids *os.File, dim int, idx *idIndex) (rows, keepIDs int64, err error) {
	h := make([]byte, npyHeaderLen)
	if _, err := io.ReadFull(f, h); err != nil {
		return 0, 0, fmt.Errorf("read .npy header: %w", err)
	}
	_, d, err := parseNPYHeader(h)
	if err != nil {
		return 0, 0, err
	}
	if d != dim {
		return 0, 0, fmt.Errorf("it holds %d-dimensional vectors and this job makes %d", d, dim)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("stat: %w", err)
	}
	// The header may lag the data (it is rewritten after each batch); the size is what
	// counts, rounded down to whole rows.
	arrayRows := (fi.Size() - npyHeaderLen) / (int64(dim) * 4)
	r := bufio.NewReader(ids)
	for rows < arrayRows {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // an incomplete last id is dropped
		}
		if err != nil {
			return 0, 0, fmt.Errorf("read ids: %w", err)
		}
		id, err := compactID(line[:len(line)-1])
		if err != nil {
			return 0, 0, fmt.Errorf("ids line %d: %v", rows+1, err)
		}
		idx.addRow(rows, id)
		keepIDs += int64(len(line))
		rows++
	}
	return rows, keepIDs, nil
}

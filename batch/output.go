package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	// failed is set by a write that failed: the writer keeps its error, and close
	// would only report it a second time.
	failed bool
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
			s.failed = true
			return fmt.Errorf("write output: %w", err)
		}
	}
	if err := s.w.Flush(); err != nil {
		s.failed = true
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

func (s *jsonlSink) close() error {
	if err := s.w.Flush(); err != nil && !s.failed {
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
// Opening, and resuming.

// output is an opened output: its sink and the number of records kept from before.
type output struct {
	sink sink
	rows int64
	// form is a .npy output's ids form.
	form idsForm
	// stream says the output is not a regular file (a pipe, a terminal, /dev/null):
	// it is written to and never read back, so there is nothing to resume or repair.
	stream bool
}

// maxRecordBytes bounds one line of a JSONL output (or of a .npy's ids file) that a
// job with ids of at most maxID bytes writes for dim-dimensional vectors: the id, at
// most 15 bytes a float ("-1.1754944e-38,") and the punctuation. Reading an output back
// never holds a longer line, so a file without newlines cannot fill memory (issue 28:
// a 300 MB one took 1 GB).
func maxRecordBytes(dim, maxID int) int { return maxID + 16*dim + 64 }

// openOutput opens path ("-" is standard output, JSONL only) for a job making
// dim-dimensional vectors with ids of at most maxID bytes. An existing non-empty
// output is resumed unless overwrite: it must read as this job's output, a partly
// written last record is cut off, the rest kept, and the id of every kept row recorded
// in idx. An existing path that is not a regular file (/dev/stdout, a FIFO,
// /dev/null) is written as a stream, never read back or truncated; a .npy output,
// which is rewritten in place, refuses one.
func openOutput(path string, format Format, dim, maxID int, overwrite bool, idx *idIndex, ids idsForm) (*output, error) {
	if path == "-" {
		if format != FormatJSONL {
			return nil, errors.New("standard output takes JSONL only; give a .npy file name for --output")
		}
		return &output{sink: &jsonlSink{w: bufio.NewWriterSize(os.Stdout, 1<<20), dim: dim}, stream: true}, nil
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		if fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0 {
			return nil, fmt.Errorf("--output %s is a block device: give a file name", path)
		}
		if format != FormatJSONL {
			return nil, fmt.Errorf("--output %s is not a regular file (%s): a .npy output is rewritten in place and read back to resume; give a file name", path, fi.Mode().Type())
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("open output: %w", err)
		}
		return &output{sink: &jsonlSink{f: f, w: bufio.NewWriterSize(f, 1<<20), dim: dim}, stream: true}, nil
	}
	if err := finishRepair(path, format); err != nil {
		return nil, err
	}
	if format == FormatNPY {
		return openNPY(path, dim, maxID, overwrite, idx, ids)
	}
	return openJSONL(path, dim, maxID, overwrite, idx)
}

// openRegular opens path for reading and writing, creating it, and refuses it when it
// turned out not to be a regular file (it changed since the caller's Stat).
func openRegular(path string, flags int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|flags, 0o644)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return f, nil
}

func openJSONL(path string, dim, maxID int, overwrite bool, idx *idIndex) (*output, error) {
	flags := 0
	if overwrite {
		flags = os.O_TRUNC
	}
	f, err := openRegular(path, flags)
	if err != nil {
		return nil, fmt.Errorf("open output: %w", err)
	}
	keep, rows, err := scanJSONL(f, dim, maxRecordBytes(dim, maxID), idx)
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
// may be incomplete (a kill mid-write), and it is cut off only when it is the start of
// a record: a file that is not this job's output is refused whole, never cut (issue
// 28: a one-line file without a newline was replaced). No line longer than maxLine is
// read.
func scanJSONL(f *os.File, dim, maxLine int, idx *idIndex) (keep, rows int64, err error) {
	r := bufio.NewReaderSize(f, 1<<20)
	notOurs := func(what string) error {
		return fmt.Errorf("line %d %s, which no record of this job is: it is not an output of this job", rows+1, what)
	}
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case len(line) > maxLine:
			return 0, 0, notOurs(fmt.Sprintf("is longer than %d bytes", maxLine))
		case errors.Is(err, bufio.ErrBufferFull):
			// A line this long is a record only if it starts as one: look before
			// reading on.
			if !isRecordPrefix(line) {
				return 0, 0, notOurs(fmt.Sprintf("begins %s", quoteStart(line, 40)))
			}
			continue
		case errors.Is(err, io.EOF):
			if len(line) > 0 && !isRecordPrefix(line) {
				return 0, 0, notOurs(fmt.Sprintf("(the last, without a newline) begins %s", quoteStart(line, 40)))
			}
			return keep, rows, nil // a partly written last record is dropped
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

// isRecordPrefix says whether b is the start of a line jsonlSink writes,
// {"id":ID,"embedding":[F,…]}, cut anywhere (a kill mid-write leaves such a start).
func isRecordPrefix(b []byte) bool {
	const head, mid = `{"id":`, `,"embedding":[`
	prefixOf := func(b []byte, s string) (rest []byte, ok, more bool) {
		if len(b) < len(s) {
			return nil, s[:len(b)] == string(b), false
		}
		return b[len(s):], string(b[:len(s)]) == s, true
	}
	b, ok, more := prefixOf(b, head)
	if !ok || !more {
		return ok
	}
	n, complete := idPrefixLen(b)
	if n < 0 || !complete {
		return n >= 0
	}
	if b, ok, more = prefixOf(b[n:], mid); !ok || !more {
		return ok
	}
	i := 0
	for i < len(b) && (b[i] == ',' || b[i] == '.' || b[i] == '-' || b[i] == '+' || b[i] == 'e' || b[i] >= '0' && b[i] <= '9' || b[i] == 'N' || b[i] == 'a' || b[i] == 'I' || b[i] == 'n' || b[i] == 'f') {
		i++
	}
	switch string(b[i:]) {
	case "", "]", "]}", "]}\n":
		return true
	}
	return false
}

// idPrefixLen returns the length of the JSON string or number that b starts with and
// whether it is complete (false: b ends inside it); -1 when b starts with neither.
func idPrefixLen(b []byte) (n int, complete bool) {
	if len(b) == 0 {
		return 0, false
	}
	if b[0] == '"' {
		for i := 1; i < len(b); i++ {
			switch {
			case b[i] == '\\':
				i++
			case b[i] == '"':
				return i + 1, true
			case b[i] < 0x20:
				return -1, false
			}
		}
		return len(b), false
	}
	i := 0
	for i < len(b) && (b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] >= '0' && b[i] <= '9') {
		i++
	}
	if i == 0 {
		return -1, false
	}
	return i, i < len(b)
}

// errLineTooLong is a line of an output or ids file longer than any this package
// writes.
var errLineTooLong = errors.New("the line is longer than any this job writes: not an output of this job")

// readLine returns the next line of r with its newline, reading at most max bytes of
// it: a longer one is errLineTooLong. A last line without a newline is io.EOF, as
// bufio.Reader.ReadBytes reports it.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, errLineTooLong
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

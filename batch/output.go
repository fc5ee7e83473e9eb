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
// .npy.

type npySink struct {
	f, ids *os.File
	w, iw  *bufio.Writer
	dim    int
	rows   int64
	buf    []byte
	form   idsForm
}

func (s *npySink) write(ids []json.RawMessage, vecs [][]float32) error {
	lines := make([][]byte, len(vecs))
	for i, v := range vecs {
		if len(v) != s.dim {
			return fmt.Errorf("vector for id %s has %d dimensions, want %d", ids[i], len(v), s.dim)
		}
		var err error
		if lines[i], err = idLine(ids[i], s.form); err != nil {
			return err
		}
	}
	for i, v := range vecs {
		b := s.buf[:0]
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		s.buf = b
		if _, err := s.w.Write(b); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
		if _, err := s.iw.Write(append(lines[i], '\n')); err != nil {
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
	if _, err := s.f.WriteAt(npyHeader(s.rows, s.dim, s.form), 0); err != nil {
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

// openNPY opens a .npy output: a new one writes its ids in form ids, one resumed
// keeps the form its header names (npyIDsForm).
func openNPY(path string, dim, maxID int, overwrite bool, idx *idIndex, form idsForm) (*output, error) {
	idsPath := IDsPath(path)
	fi, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("output: %w", err)
	}
	fresh := overwrite || errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Size() == 0)
	ifi, ierr := os.Stat(idsPath)
	switch {
	case ierr == nil && !ifi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (%s): a .npy output's ids are rewritten in place and read back to resume; choose another --output", idsPath, ifi.Mode().Type())
	case fresh && !overwrite && ierr == nil && ifi.Size() > 0:
		// The job writes the array's header before any id: ids beside an empty
		// array are not this job's, and starting over would truncate them.
		return nil, fmt.Errorf("%s holds data but %s holds no array: the pair is not an output of this job; pass --overwrite to start it over, or choose another --output", idsPath, path)
	}
	if fresh {
		f, err := openRegular(path, os.O_TRUNC)
		if err != nil {
			return nil, fmt.Errorf("open output: %w", err)
		}
		ids, err := openRegular(idsPath, os.O_TRUNC)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("open ids: %w", err)
		}
		if _, err := f.Write(npyHeader(0, dim, form)); err != nil {
			f.Close()
			ids.Close()
			return nil, fmt.Errorf("write .npy header: %w", err)
		}
		return &output{sink: &npySink{f: f, ids: ids, w: bufio.NewWriterSize(f, 1<<20), iw: bufio.NewWriter(ids), dim: dim, form: form}, form: form}, nil
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
	rows, keepIDs, form, err := scanNPY(f, ids, dim, maxID+2, idx)
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
	if _, err := f.WriteAt(npyHeader(rows, dim, form), 0); err != nil {
		return fail(fmt.Errorf("write .npy header: %w", err))
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return fail(fmt.Errorf("seek output: %w", err))
	}
	if _, err := ids.Seek(0, io.SeekEnd); err != nil {
		return fail(fmt.Errorf("seek ids: %w", err))
	}
	return &output{sink: &npySink{f: f, ids: ids, w: bufio.NewWriterSize(f, 1<<20), iw: bufio.NewWriter(ids), dim: dim, rows: rows, form: form}, rows: rows, form: form}, nil
}

// scanNPY returns how many rows of an existing .npy output are complete, in the array
// and in the ids file both, the size of the ids file's first rows lines and the form
// of its ids; it records each of those rows' ids in idx. No ids line longer than
// maxLine is read.
func scanNPY(f, ids *os.File, dim, maxLine int, idx *idIndex) (rows, keepIDs int64, form idsForm, err error) {
	h := make([]byte, npyHeaderLen)
	if _, err := io.ReadFull(f, h); err != nil {
		return 0, 0, form, fmt.Errorf("read .npy header: %w", err)
	}
	_, d, err := parseNPYHeader(h)
	if err != nil {
		return 0, 0, form, err
	}
	form = npyIDsForm(h)
	if d != dim {
		return 0, 0, form, fmt.Errorf("it holds %d-dimensional vectors and this job makes %d", d, dim)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, form, fmt.Errorf("stat: %w", err)
	}
	// The header may lag the data (it is rewritten after each batch); the size is what
	// counts, rounded down to whole rows.
	arrayRows := (fi.Size() - npyHeaderLen) / (int64(dim) * 4)
	r := bufio.NewReaderSize(ids, 64<<10)
	for rows < arrayRows {
		line, err := readLine(r, maxLine)
		if errors.Is(err, io.EOF) {
			break // an incomplete last id is dropped
		}
		if err != nil {
			return 0, 0, form, fmt.Errorf("read ids line %d: %w", rows+1, err)
		}
		id, err := lineID(line[:len(line)-1], form)
		if err != nil {
			return 0, 0, form, fmt.Errorf("ids line %d: %v", rows+1, err)
		}
		idx.addRow(rows, id)
		keepIDs += int64(len(line))
		rows++
	}
	return rows, keepIDs, form, nil
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

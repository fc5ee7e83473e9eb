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
	"regexp"
	"strconv"
)

// npyHeaderLen is the size of every .npy header this package writes: magic, version,
// length and the padded dictionary. A fixed size lets the row count be rewritten in
// place as the file grows; 128 bytes hold any count up to 2^63 and keep the data
// 64-byte aligned, as NumPy requires of writers.
const npyHeaderLen = 128

// npyMagic starts every .npy file; 1, 0 is format version 1.0.
var npyMagic = []byte("\x93NUMPY\x01\x00")

// idsForm is how a .npy output's ids file writes each id, one a line.
type idsForm bool

const (
	// idsJSON writes each id as its JSON (a string quoted and escaped, a number as
	// written): every id the job accepts round-trips, line breaks and "7" versus 7
	// included. A .parquet job's work file holds its ids so, as did every .npy
	// output before plain ids (issue 27).
	idsJSON idsForm = false
	// idsText writes each id as its text: a string's value, a number as written.
	// What a user reads with `wc -l`, `paste` or a plain line split; ids with a line
	// break are refused, and ids compare as text ("7" and 7 are one id).
	idsText idsForm = true
)

// npyHeader returns the header of a little-endian float32, C-order [rows, dim] array
// whose ids file is in form ids. The form is marked in the dictionary's last
// characters, which NumPy ignores: "), }" (NumPy's own spelling, and every header of
// this package before plain ids) for JSON ids, ")}" for plain ones. A resume and a
// merge read it, so a file keeps its form for its life and files written by older
// versions resume as they are.
func npyHeader(rows int64, dim int, ids idsForm) []byte {
	end := ", }"
	if ids == idsText {
		end = "}"
	}
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d)%s", rows, dim, end)
	h := make([]byte, 0, npyHeaderLen)
	h = append(h, npyMagic...)
	h = binary.LittleEndian.AppendUint16(h, uint16(npyHeaderLen-len(npyMagic)-2))
	h = append(h, dict...)
	for len(h) < npyHeaderLen-1 {
		h = append(h, ' ')
	}
	return append(h, '\n')
}

var npyDictRE = regexp.MustCompile(`^\{'descr': '([^']*)', 'fortran_order': (True|False), 'shape': \((\d+), (\d+)\)(, )?\} *\n$`)

// parseNPYHeader reads a header written by npyHeader and returns the rows and dim it
// declares; npyIDsForm says the form of its ids. Files from other writers are refused: their header may have another length,
// which would not leave room to rewrite the count in place.
func parseNPYHeader(h []byte) (rows int64, dim int, err error) {
	if len(h) < npyHeaderLen || !bytes.Equal(h[:len(npyMagic)], npyMagic) {
		return 0, 0, fmt.Errorf("not a NumPy 1.0 .npy file")
	}
	if n := binary.LittleEndian.Uint16(h[len(npyMagic):]); int(n) != npyHeaderLen-len(npyMagic)-2 {
		return 0, 0, fmt.Errorf(".npy header is %d bytes, not the %d this job writes", int(n)+len(npyMagic)+2, npyHeaderLen)
	}
	m := npyDictRE.FindSubmatch(h[len(npyMagic)+2 : npyHeaderLen])
	if m == nil {
		return 0, 0, fmt.Errorf(".npy header %q is not a 2-D array header", h[len(npyMagic)+2:npyHeaderLen])
	}
	if string(m[1]) != "<f4" || string(m[2]) != "False" {
		return 0, 0, fmt.Errorf(".npy holds %s (fortran_order %s), not little-endian float32 in C order", m[1], m[2])
	}
	rows, err = strconv.ParseInt(string(m[3]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf(".npy row count: %w", err)
	}
	d, err := strconv.Atoi(string(m[4]))
	if err != nil {
		return 0, 0, fmt.Errorf(".npy dimension: %w", err)
	}
	return rows, d, nil
}

// npyIDsForm is the form of the ids of the .npy file whose header (checked by
// parseNPYHeader) is h.
func npyIDsForm(h []byte) idsForm {
	return idsForm(!bytes.Contains(h[:npyHeaderLen], []byte("), }")))
}

// idLine is id as a line of an ids file in form f, without its newline.
func idLine(id json.RawMessage, f idsForm) ([]byte, error) {
	if f == idsJSON {
		return id, nil
	}
	t := jsonText(id)
	if bytes.ContainsAny(t, "\r\n") {
		return nil, fmt.Errorf("the id %s holds a line break, which a .npy output's ids file (one id a line, as text) cannot hold", id)
	}
	return t, nil
}

// lineID is the id that a line of an ids file in form f (without its newline)
// holds, as JSON: for a plain line, the JSON string of its text, which compares
// as that text (idIndex.text, partReader.matches).
func lineID(line []byte, f idsForm) (json.RawMessage, error) {
	if f == idsJSON {
		return compactID(line)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(string(line)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// npySink writes float32 rows to a .npy file and their ids, one a line, to its
// .ids file (IDsPath).
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

package batch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
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

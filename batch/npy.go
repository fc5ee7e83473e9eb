package batch

import (
	"bytes"
	"encoding/binary"
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

// npyHeader returns the header of a little-endian float32, C-order [rows, dim] array.
func npyHeader(rows int64, dim int) []byte {
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, dim)
	h := make([]byte, 0, npyHeaderLen)
	h = append(h, npyMagic...)
	h = binary.LittleEndian.AppendUint16(h, uint16(npyHeaderLen-len(npyMagic)-2))
	h = append(h, dict...)
	for len(h) < npyHeaderLen-1 {
		h = append(h, ' ')
	}
	return append(h, '\n')
}

var npyDictRE = regexp.MustCompile(`^\{'descr': '([^']*)', 'fortran_order': (True|False), 'shape': \((\d+), (\d+)\), \} *\n$`)

// parseNPYHeader reads a header written by npyHeader and returns the rows and dim it
// declares. Files from other writers are refused: their header may have another length,
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

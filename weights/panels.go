package weights

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/embed-stack/embed-stack/gguf"
)

// The layout embed-stack's BF16 kernels multiply with (backends/llama's accel.c,
// "Products with BF16 weight matrices"), written into a converted copy so that a
// worker maps its matrices as they are instead of repacking them at start: measured
// on the AMD Zen 5 host, the repack made a 0.6B worker's start 1.5 to 2 s longer and
// kept a private copy of the weights in every worker. A matrix of N rows of K
// values is ceil(N/32) panels of 32 rows; panel p holds, for each pair of values
// k, k+1 of a row, the pairs of its 32 rows in order: [p][k/2][j][k%2]. accel.c
// reads the file's list of such matrices (panelsKey) and the width (panelWidthKey),
// and refuses the file where its kernels cannot read them.
const (
	panelsKey     = "embed_stack.bf16_panels"
	panelWidthKey = "embed_stack.bf16_panel_width"
	panelWidth    = 32
	// panelTag ends the conversion's tag in a copy's name when it has panels.
	panelTag = "-esk32"
	// panelAlignment is the data alignment of a copy with panels: the kernels load
	// a panel's 64-byte rows with aligned loads.
	panelAlignment = 64
)

// panelMatrix says whether t, converted to BF16, is stored as panels: a layer's
// matrix (blk.*: the products embed-stack's kernels take; the token embedding is
// read by rows, and stays as it is) of whole panels, as accel.c's es_bf16_matrix
// takes it: rows of an even number of values, at least 32 of them, and at least 16
// rows.
func panelMatrix(t gguf.TensorInfo) bool {
	if !strings.HasPrefix(t.Name, "blk.") || len(t.Dims) < 2 {
		return false
	}
	for _, d := range t.Dims[2:] {
		if d != 1 {
			return false
		}
	}
	k, n := t.Dims[0], t.Dims[1]
	return k%2 == 0 && k >= 32 && n >= 16 && n%panelWidth == 0
}

// panelWriter takes a BF16 matrix's bytes row by row and writes them as panels,
// one panel (32 rows) at a time.
type panelWriter struct {
	w    io.Writer
	k    int // values a row
	rows []byte
	out  []byte
}

func newPanelWriter(w io.Writer, k int) *panelWriter {
	return &panelWriter{w: w, k: k, rows: make([]byte, 0, panelWidth*k*2), out: make([]byte, panelWidth*k*2)}
}

func (p *panelWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		take := min(len(b), cap(p.rows)-len(p.rows))
		p.rows = append(p.rows, b[:take]...)
		b = b[take:]
		if len(p.rows) == cap(p.rows) {
			if err := p.flush(); err != nil {
				return n - len(b), err
			}
		}
	}
	return n, nil
}

// flush writes the 32 rows held as one panel.
func (p *panelWriter) flush() error {
	pairs := p.k / 2
	for j := range panelWidth {
		row := p.rows[j*p.k*2:]
		for kp := range pairs {
			v := binary.LittleEndian.Uint32(row[kp*4:])
			binary.LittleEndian.PutUint32(p.out[(kp*panelWidth+j)*4:], v)
		}
	}
	p.rows = p.rows[:0]
	_, err := p.w.Write(p.out)
	return err
}

// Close fails a matrix that did not end on a whole panel.
func (p *panelWriter) Close() error {
	if len(p.rows) != 0 {
		return fmt.Errorf("weights: %d bytes left of a partial panel", len(p.rows))
	}
	return nil
}

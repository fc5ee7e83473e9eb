package batch

// Reading the parts of a sharded run, row by row in input order, for Merge.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

// partReader reads a part's rows in order.
type partReader struct {
	path string
	f    *os.File
	r    *bufio.Reader
	ids  *bufio.Reader // .npy: the ids file
	idsF *os.File
	npy  bool
	form idsForm // .npy: its ids' form
	dim  int     // 0 for an empty JSONL part
	rows int64   // .npy: rows in the header
	row  int64   // index of the current row

	maxLine int // the longest line read (JSONL rows, .npy ids)

	// pq reads the ids of a Parquet output (Merge.Verify); pqIDs are those read
	// ahead.
	pq    *parquet.GenericReader[parquetID]
	pqIDs []parquetID

	ok  bool // a current row is loaded
	id  json.RawMessage
	vec []float32
	buf []byte
}

// parquetID is the column a Parquet output's ids are read from.
type parquetID struct {
	ID string `parquet:"id"`
}

// matches says whether the current row is the item with id: the same JSON, or for
// a Parquet output the same text.
func (p *partReader) matches(id json.RawMessage) bool {
	switch {
	case p.pq != nil:
		return string(jsonText(id)) == string(p.id)
	case p.npy:
		return string(jsonText(id)) == string(jsonText(p.id))
	}
	return bytes.Equal(p.id, id)
}

// openPart opens a JSONL or .npy part whose ids are at most maxID bytes.
func openPart(path string, maxID int) (*partReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	p := &partReader{path: path, f: f, r: bufio.NewReaderSize(f, 1<<20), row: -1}
	if FormatFor(path) == FormatNPY {
		p.npy = true
		h := make([]byte, npyHeaderLen)
		if _, err := io.ReadFull(p.r, h); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: read .npy header: %w", path, err)
		}
		if p.rows, p.dim, err = parseNPYHeader(h); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		p.form = npyIDsForm(h)
		if p.idsF, err = os.Open(IDsPath(path)); err != nil {
			f.Close()
			return nil, err
		}
		p.ids = bufio.NewReader(p.idsF)
		p.buf = make([]byte, 4*p.dim)
		p.vec = make([]float32, p.dim)
		p.maxLine = maxID + 2
	} else {
		// The dimension is not known before the first row: bound it by the largest
		// a model has (a row is checked against the first's dimension after).
		p.maxLine = maxRecordBytes(1<<16, maxID)
	}
	if err := p.advance(); err != nil {
		p.close()
		return nil, err
	}
	if !p.npy && p.ok {
		p.dim = len(p.vec)
	}
	return p, nil
}

// openParquetPart opens a Parquet output for its ids. A file that is not Parquet,
// or lacks the id and embedding columns, is refused.
func openParquetPart(path string) (*partReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	pf, err := parquet.OpenFile(f, fi.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, ok := pf.Schema().Lookup("id"); !ok {
		f.Close()
		return nil, fmt.Errorf("%s: no id column", path)
	}
	if _, ok := pf.Schema().Lookup("embedding", "list", "element"); !ok {
		f.Close()
		return nil, fmt.Errorf("%s: no embedding column", path)
	}
	p := &partReader{path: path, f: f, row: -1, pq: parquet.NewGenericReader[parquetID](pf)}
	if err := p.advance(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// advance loads the next row; at the end ok is false.
func (p *partReader) advance() error {
	p.ok = false
	if p.pq != nil {
		if len(p.pqIDs) == 0 {
			buf := make([]parquetID, 1024)
			n, err := p.pq.Read(buf)
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("%s: %w", p.path, err)
			}
			if n == 0 {
				return nil
			}
			p.pqIDs = buf[:n]
		}
		p.id, p.ok = json.RawMessage(p.pqIDs[0].ID), true
		p.pqIDs = p.pqIDs[1:]
		p.row++
		return nil
	}
	if p.npy {
		if p.row+1 >= p.rows {
			return nil
		}
		if _, err := io.ReadFull(p.r, p.buf); err != nil {
			return fmt.Errorf("%s: row %d: %w (a part of a job that is still running or was killed: rerun its shard)", p.path, p.row+2, err)
		}
		id, err := readLine(p.ids, p.maxLine)
		if err != nil {
			return fmt.Errorf("%s: line %d: %w", IDsPath(p.path), p.row+2, err)
		}
		for i := range p.vec {
			p.vec[i] = math.Float32frombits(binary.LittleEndian.Uint32(p.buf[4*i:]))
		}
		if p.id, err = lineID(id[:len(id)-1], p.form); err != nil {
			return fmt.Errorf("%s: line %d: %w", IDsPath(p.path), p.row+2, err)
		}
		p.ok = true
		p.row++
		return nil
	}
	line, err := readLine(p.r, p.maxLine)
	if errors.Is(err, io.EOF) {
		if len(line) > 0 {
			return fmt.Errorf("%s: row %d is incomplete (a part of a job that is still running or was killed: rerun its shard)", p.path, p.row+2)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", p.path, err)
	}
	id, vec, err := parseJSONLVector(line[:len(line)-1], p.vec[:0])
	if err != nil {
		return fmt.Errorf("%s: row %d: %w", p.path, p.row+2, err)
	}
	if p.dim != 0 && len(vec) != p.dim {
		return fmt.Errorf("%s: row %d has %d dimensions, the first %d", p.path, p.row+2, len(vec), p.dim)
	}
	p.id, p.vec, p.ok = id, vec, true
	p.row++
	return nil
}

func (p *partReader) close() {
	if p.pq != nil {
		p.pq.Close()
	}
	p.f.Close()
	if p.idsF != nil {
		p.idsF.Close()
	}
}

// parseJSONLVector reads a record written by jsonlSink: its id and its floats,
// appended to vec.
func parseJSONLVector(line []byte, vec []float32) (json.RawMessage, []float32, error) {
	id, _, err := parseJSONLRecord(line)
	if err != nil {
		return nil, nil, err
	}
	arr := line[bytes.Index(line, []byte(`"embedding":[`))+len(`"embedding":[`) : len(line)-2]
	for len(arr) > 0 {
		num, rest, _ := bytes.Cut(arr, []byte{','})
		x, err := strconv.ParseFloat(string(num), 32)
		if err != nil {
			return nil, nil, fmt.Errorf("embedding: %w", err)
		}
		vec = append(vec, float32(x))
		arr = rest
	}
	return append(json.RawMessage(nil), id...), vec, nil
}

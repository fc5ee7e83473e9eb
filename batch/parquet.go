package batch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/parquet-go/parquet-go"
)

// Parquet output (written by Merge, never resumed: a Parquet file is readable only
// once its footer is written) has one row per item:
//
//	id         string, required: a string id's value, a number id as written
//	embedding  list<float32>, required, elements required
//	FIELD…     string, optional: each passthrough field of the input line, a string's
//	           value or any other JSON value's text; null when the line lacks it
//
// Rows go in row groups of parquetGroupRows, uncompressed (float vectors do not
// compress, and readers need no codec).
const parquetGroupRows = 8192

// parquetSink writes rows to a Parquet file.
type parquetSink struct {
	f      *os.File
	w      *parquet.Writer
	dim    int
	fields []string // passthrough fields, sorted as the schema's columns are
	col    map[string]int
	rows   []parquet.Row
}

// CheckPassthrough refuses passthrough field names a Parquet output cannot take:
// one named twice, and "id" or "embedding", which are its own columns. embed and
// merge check them before any work, not at the end when the file is written.
func CheckPassthrough(names []string) error {
	seen := map[string]bool{}
	for _, name := range names {
		switch {
		case name == "id" || name == "embedding":
			return fmt.Errorf("--passthrough %s: the output has a column %q of its own (the item's %s); pass-through fields are the input's others", name, name, map[string]string{"id": "id", "embedding": "vector"}[name])
		case seen[name]:
			return fmt.Errorf("--passthrough names the field %q twice", name)
		}
		seen[name] = true
	}
	return nil
}

func newParquetSink(f *os.File, dim int, passthrough []string) (*parquetSink, error) {
	if err := CheckPassthrough(passthrough); err != nil {
		return nil, err
	}
	group := parquet.Group{
		"id":        parquet.String(),
		"embedding": parquet.List(parquet.Leaf(parquet.FloatType)),
	}
	for _, name := range passthrough {
		group[name] = parquet.Optional(parquet.String())
	}
	schema := parquet.NewSchema("embeddings", group)
	s := &parquetSink{f: f, dim: dim, col: map[string]int{}}
	for i, path := range schema.Columns() {
		s.col[path[0]] = i
	}
	s.fields = slices.Clone(passthrough)
	slices.Sort(s.fields)
	s.w = parquet.NewWriter(f, schema, parquet.MaxRowsPerRowGroup(parquetGroupRows))
	return s, nil
}

// add appends one row; extra holds the passthrough fields' raw JSON by name.
func (s *parquetSink) add(id json.RawMessage, vec []float32, extra map[string]json.RawMessage) error {
	if len(vec) != s.dim {
		return fmt.Errorf("vector for id %s has %d dimensions, want %d", id, len(vec), s.dim)
	}
	row := make(parquet.Row, 0, len(vec)+1+len(s.fields))
	// Columns in schema order: embedding, id, then the fields (all sorted by name).
	ec := s.col["embedding"]
	for i, x := range vec {
		rep := 1
		if i == 0 {
			rep = 0
		}
		row = append(row, parquet.FloatValue(x).Level(rep, 1, ec))
	}
	if len(vec) == 0 {
		row = append(row, parquet.NullValue().Level(0, 0, ec))
	}
	row = append(row, parquet.ByteArrayValue(jsonText(id)).Level(0, 0, s.col["id"]))
	for _, name := range s.fields {
		raw, ok := extra[name]
		if !ok || string(raw) == "null" {
			row = append(row, parquet.NullValue().Level(0, 0, s.col[name]))
			continue
		}
		row = append(row, parquet.ByteArrayValue(jsonText(raw)).Level(0, 1, s.col[name]))
	}
	slices.SortStableFunc(row, func(a, b parquet.Value) int { return a.Column() - b.Column() })
	s.rows = append(s.rows, row)
	if len(s.rows) == 256 {
		return s.flush()
	}
	return nil
}

func (s *parquetSink) flush() error {
	if _, err := s.w.WriteRows(s.rows); err != nil {
		return fmt.Errorf("write parquet: %w", err)
	}
	s.rows = s.rows[:0]
	return nil
}

func (s *parquetSink) close() error {
	if err := s.flush(); err != nil {
		s.f.Close()
		return err
	}
	if err := s.w.Close(); err != nil {
		s.f.Close()
		return fmt.Errorf("write parquet: %w", err)
	}
	return s.f.Close()
}

// jsonText is a JSON string's value, or any other JSON value's compact text.
func jsonText(raw json.RawMessage) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return []byte(s)
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

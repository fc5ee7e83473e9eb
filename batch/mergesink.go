package batch

// Writing Merge's output: a temporary file in the output's format, renamed into
// place when the merge is complete.

import (
	"encoding/json"
	"errors"
	"os"
)

type mergeSink struct {
	tmp    string
	format Format
	sink   sink // JSONL and .npy
	pq     *parquetSink
	ids    []json.RawMessage
	vecs   [][]float32
}

func newMergeSink(tmp string, format Format, dim int, passthrough []string, rec *JobRecord) (*mergeSink, error) {
	s := &mergeSink{tmp: tmp, format: format}
	if format == FormatParquet {
		f, err := os.Create(tmp)
		if err != nil {
			return nil, err
		}
		if s.pq, err = newParquetSink(f, dim, passthrough); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, err
		}
		if rec != nil {
			b, err := json.Marshal(rec)
			if err != nil {
				s.abort()
				return nil, err
			}
			s.pq.w.SetKeyValueMetadata(parquetRecordKey, string(b))
		}
		return s, nil
	}
	out, err := openOutput(tmp, format, dim, DefaultMaxLineBytes, true, newIDIndex(), idsText)
	if err != nil {
		return nil, err
	}
	s.sink = out.sink
	return s, nil
}

func (s *mergeSink) add(id json.RawMessage, vec []float32, extra map[string]json.RawMessage) error {
	if s.pq != nil {
		return s.pq.add(id, vec, extra)
	}
	s.ids = append(s.ids, id)
	s.vecs = append(s.vecs, slicesClone(vec))
	if len(s.ids) == 256 {
		return s.flush()
	}
	return nil
}

func (s *mergeSink) flush() error {
	if len(s.ids) == 0 {
		return nil
	}
	err := s.sink.write(s.ids, s.vecs)
	s.ids, s.vecs = s.ids[:0], s.vecs[:0]
	return err
}

func slicesClone(v []float32) []float32 { return append([]float32(nil), v...) }

// commit closes the temporary output and renames it (and its ids) into place.
func (s *mergeSink) commit(path string) error {
	var err error
	if s.pq != nil {
		err = s.pq.close()
	} else {
		err = errors.Join(s.flush(), s.sink.close())
	}
	if err != nil {
		return err
	}
	if s.format == FormatNPY {
		if err := os.Rename(IDsPath(s.tmp), IDsPath(path)); err != nil {
			return err
		}
	}
	return os.Rename(s.tmp, path)
}

func (s *mergeSink) abort() {
	if s.pq != nil {
		s.pq.f.Close()
	} else {
		s.sink.close()
	}
	os.Remove(s.tmp)
	os.Remove(IDsPath(s.tmp))
}

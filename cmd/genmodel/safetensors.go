package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/x448/float16"

	"github.com/embed-stack/embed-stack/gguf"
)

// safetensors is a read-only model.safetensors: an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the data.
type safetensors struct {
	path    string
	data    int64 // offset of the data section
	tensors map[string]safetensor
}

type safetensor struct {
	Dtype   string   `json:"dtype"`
	Shape   []uint64 `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

func openSafetensors(path string) (*safetensors, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var n uint64
	if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if n > 100<<20 || int64(n)+8 > st.Size() {
		return nil, fmt.Errorf("%s: header length %d does not fit the file's %d bytes", path, n, st.Size())
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	s := &safetensors{path: path, data: 8 + int64(n), tensors: map[string]safetensor{}}
	for name, m := range raw {
		if name == "__metadata__" {
			continue
		}
		var t safetensor
		if err := json.Unmarshal(m, &t); err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %w", path, name, err)
		}
		size := map[string]int64{"F32": 4, "F16": 2, "I64": 8}[t.Dtype]
		if size == 0 {
			return nil, fmt.Errorf("%s: tensor %s is %s; F32 and F16 are converted", path, name, t.Dtype)
		}
		elems := int64(1)
		for _, d := range t.Shape {
			elems *= int64(d)
		}
		if t.Offsets[1]-t.Offsets[0] != elems*size || t.Offsets[0] < 0 || s.data+t.Offsets[1] > st.Size() {
			return nil, fmt.Errorf("%s: tensor %s's byte range %v does not hold %v %s values", path, name, t.Offsets, t.Shape, t.Dtype)
		}
		s.tensors[strings.TrimPrefix(name, "bert.")] = t
	}
	return s, nil
}

// fill returns a writer of tensor name's values encoded as typ, after checking that
// its shape, reversed into GGUF's order, is dims. PyTorch stores a Linear layer's
// weight as [out, in] row-major, which is GGUF's [in, out]: the bytes need no
// transposition.
func (s *safetensors) fill(name string, dims []uint64, typ gguf.GGMLType) (func(io.Writer) error, error) {
	t, ok := s.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s has no tensor %s", s.path, name)
	}
	if t.Dtype != "F32" && t.Dtype != "F16" {
		// BertModel's I64 embeddings.position_ids buffer is never converted.
		return nil, fmt.Errorf("%s: tensor %s is %s; F32 and F16 are converted", s.path, name, t.Dtype)
	}
	want := slices.Clone(dims)
	slices.Reverse(want)
	if !slices.Equal(t.Shape, want) {
		return nil, fmt.Errorf("%s: tensor %s has shape %v, want %v", s.path, name, t.Shape, want)
	}
	return func(w io.Writer) error {
		f, err := os.Open(s.path)
		if err != nil {
			return err
		}
		defer f.Close()
		raw := make([]byte, t.Offsets[1]-t.Offsets[0])
		if _, err := f.ReadAt(raw, s.data+t.Offsets[0]); err != nil {
			return fmt.Errorf("%s: tensor %s: %w", s.path, name, err)
		}
		var vals []float32
		switch t.Dtype {
		case "F32":
			vals = make([]float32, len(raw)/4)
			for i := range vals {
				vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		case "F16":
			vals = make([]float32, len(raw)/2)
			for i := range vals {
				vals[i] = float16.Frombits(binary.LittleEndian.Uint16(raw[2*i:])).Float32()
			}
		}
		buf, err := gguf.AppendEncoded(nil, typ, vals)
		if err != nil {
			return err
		}
		_, err = w.Write(buf)
		return err
	}, nil
}

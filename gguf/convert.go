package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/x448/float16"
)

// convertChunk is how many values Convert re-encodes at a time: 4 MiB of F32 source,
// so that converting a 16 GB model holds a few MiB, never a tensor (an 8B model's
// token embedding alone is 1.2 GB in F16).
const convertChunk = 1 << 20

// ConvertStats says what Convert did.
type ConvertStats struct {
	// Tensors is how many tensors were re-encoded, SourceBytes their bytes in the
	// source file and TargetBytes in the new one.
	Tensors                  int
	SourceBytes, TargetBytes uint64
	// FileBytes is the size of the file written.
	FileBytes uint64
}

// Convert writes a copy of f to path in which each tensor for which convert returns
// true is re-encoded as the type to (rounded as AppendEncoded rounds: an F16 value
// becomes RNE(float32(f16)) in BF16, which is what llama.cpp's converter writes
// for a BF16 file made from the same float32 weights). Everything else is kept:
// the header and every metadata key and value byte for byte (general.file_type
// included, which then still names the source's type; llama.cpp only prints it),
// the tensors in their order with their names and dims, and the bytes of every
// tensor not converted. Offsets are recomputed (each tensor aligned as ggml aligns
// it), since a converted tensor changes size.
//
// It streams: tensors are copied or converted a chunk at a time, so memory stays a
// few MiB whatever the file's size. The file appears atomically (a temporary name in
// path's folder, synced and renamed), so an interrupted conversion leaves no partial
// file at path. convert may only pick tensors of a type Decode reads and whose row
// length is a multiple of to's block size.
func (f *File) Convert(path string, to GGMLType, convert func(TensorInfo) bool) (ConvertStats, error) {
	var st ConvertStats
	switch to {
	case TypeF32, TypeF16, TypeBF16, TypeF64, TypeQ8_0:
	default:
		return st, fmt.Errorf("gguf: converting to %s is not supported (supported: F32, F16, BF16, F64, Q8_0)", to)
	}
	out := make([]TensorInfo, len(f.tensors))
	conv := make([]bool, len(f.tensors))
	var offset uint64
	for i, t := range f.tensors {
		t.Dims = append([]uint64(nil), t.Dims...)
		if conv[i] = convert(t) && t.Type != to; conv[i] {
			switch t.Type {
			case TypeF32, TypeF16, TypeBF16, TypeF64, TypeQ8_0:
			default:
				return st, fmt.Errorf("gguf: tensor %q has type %s; converting supports F32, F16, BF16, F64 and Q8_0", t.Name, t.Type)
			}
			if len(t.Dims) > 0 && t.Dims[0]%to.BlockSize() != 0 {
				return st, fmt.Errorf("gguf: tensor %q has rows of %d values, not a multiple of %s's block size %d", t.Name, t.Dims[0], to, to.BlockSize())
			}
			st.Tensors++
			st.SourceBytes += t.Bytes()
			t.Type = to
			st.TargetBytes += t.Bytes()
		}
		t.Offset = offset
		offset += alignUp(t.Bytes(), f.alignment)
		out[i] = t
	}
	head := io.NewSectionReader(f.f, 0, int64(f.kvEnd))
	err := writeAtomic(path, func(bw *bufio.Writer) error {
		e := &encoder{w: bw}
		n, err := io.Copy(bw, head)
		if err != nil {
			return fmt.Errorf("gguf: copying the metadata of %s: %w", f.path, err)
		}
		e.n = uint64(n)
		e.tensorIndex(out)
		e.pad(f.alignment)
		if e.err != nil {
			return fmt.Errorf("gguf: writing %s: %w", path, e.err)
		}
		for i, t := range out {
			src := f.tensors[i]
			fill := func(w io.Writer) error {
				_, err := io.Copy(w, f.TensorReader(src))
				return err
			}
			if conv[i] {
				fill = func(w io.Writer) error { return f.convertTensor(w, src, to) }
			}
			if err := e.tensorData(path, t, f.alignment, fill); err != nil {
				return err
			}
		}
		st.FileBytes = e.n
		return nil
	})
	return st, err
}

// convertTensor writes src's values re-encoded as to, a chunk at a time.
func (f *File) convertTensor(w io.Writer, src TensorInfo, to GGMLType) error {
	r := f.TensorReader(src)
	// A chunk is a whole number of source blocks and of target blocks.
	blocks := max(1, convertChunk/src.Type.BlockSize()/to.BlockSize()) * to.BlockSize()
	raw := make([]byte, blocks*src.Type.TypeSize())
	vals := make([]float32, 0, blocks*src.Type.BlockSize())
	enc := make([]byte, 0, uint64(cap(vals))/to.BlockSize()*to.TypeSize())
	for remaining := src.Bytes(); remaining > 0; {
		n := min(remaining, uint64(len(raw)))
		if _, err := io.ReadFull(r, raw[:n]); err != nil {
			return fmt.Errorf("reading %s: %w", f.path, err)
		}
		remaining -= n
		var err error
		if vals, err = decodeFloat32(vals[:0], src.Type, raw[:n]); err != nil {
			return err
		}
		if enc, err = AppendEncoded(enc[:0], to, vals); err != nil {
			return err
		}
		if _, err := w.Write(enc); err != nil {
			return err
		}
	}
	return nil
}

// decodeFloat32 appends the values of data, whole blocks of typ, to dst as float32.
// F16 and F32, the types a conversion starts from, are read directly; the others go
// through Decode, whose values of every type but F64 are float32 values exactly.
func decodeFloat32(dst []float32, typ GGMLType, data []byte) ([]float32, error) {
	switch typ {
	case TypeF16:
		for i := 0; i+1 < len(data); i += 2 {
			dst = append(dst, float16.Frombits(binary.LittleEndian.Uint16(data[i:])).Float32())
		}
		return dst, nil
	case TypeF32:
		for i := 0; i+3 < len(data); i += 4 {
			dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(data[i:])))
		}
		return dst, nil
	}
	vals, err := Decode(typ, data)
	if err != nil {
		return dst, err
	}
	for _, v := range vals {
		dst = append(dst, float32(v))
	}
	return dst, nil
}

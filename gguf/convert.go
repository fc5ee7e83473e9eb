package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

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
	return f.ConvertWith(path, ConvertOptions{To: to, Convert: convert})
}

// ConvertOptions is what ConvertWith does beyond Convert.
type ConvertOptions struct {
	// To and Convert are Convert's: the type, and which tensors are re-encoded.
	To      GGMLType
	Convert func(TensorInfo) bool
	// Alignment, when not 0, is the copy's data alignment (a power of two; written
	// as general.alignment), else the source's.
	Alignment uint32
	// KVs are metadata pairs added after the source's, as Writer.AddKV takes them;
	// a key the source has is replaced in place.
	KVs []KV
	// Layout, when set, may rewrite the bytes of a tensor after its conversion:
	// for a tensor it returns a writer that takes the tensor's bytes (as they would
	// be written) and writes the same number of bytes to w, else nil. A writer that
	// is an io.Closer is closed after the tensor's last byte, and a Close error
	// fails the copy.
	Layout func(t TensorInfo, w io.Writer) io.Writer
}

// KV is one metadata pair.
type KV struct {
	Key   string
	Value any
}

// ConvertWith is Convert with options: metadata added, another alignment, and
// tensors laid out anew. Without KVs or Alignment the metadata is the source's
// byte for byte.
func (f *File) ConvertWith(path string, o ConvertOptions) (ConvertStats, error) {
	to, convert := o.To, o.Convert
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
		out[i] = t
	}
	alignment := f.alignment
	kvs := o.KVs
	if o.Alignment != 0 {
		if o.Alignment&(o.Alignment-1) != 0 {
			return st, fmt.Errorf("gguf: alignment %d is not a power of two", o.Alignment)
		}
		alignment = uint64(o.Alignment)
		kvs = append(slices.Clone(kvs), KV{AlignmentKey, o.Alignment})
	}
	for i := range out {
		out[i].Offset = offset
		offset += alignUp(out[i].Bytes(), alignment)
	}
	head, err := f.metadata(kvs)
	if err != nil {
		return st, err
	}
	err = writeAtomic(path, func(bw *bufio.Writer) error {
		e := &encoder{w: bw}
		n, err := io.Copy(bw, head)
		if err != nil {
			return fmt.Errorf("gguf: copying the metadata of %s: %w", f.path, err)
		}
		e.n = uint64(n)
		e.tensorIndex(out)
		e.pad(alignment)
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
			if o.Layout != nil {
				fill = relaid(fill, t, o.Layout)
			}
			if err := e.tensorData(path, t, alignment, fill); err != nil {
				return err
			}
		}
		st.FileBytes = e.n
		return nil
	})
	return st, err
}

// relaid is fill through layout's writer for t, where it gives one.
func relaid(fill func(io.Writer) error, t TensorInfo, layout func(TensorInfo, io.Writer) io.Writer) func(io.Writer) error {
	return func(w io.Writer) error {
		lw := layout(t, w)
		if lw == nil {
			return fill(w)
		}
		if err := fill(lw); err != nil {
			return err
		}
		if c, ok := lw.(io.Closer); ok {
			return c.Close()
		}
		return nil
	}
}

// metadata is the header and metadata of the copy: the source's bytes, or with kvs
// they re-encoded, each kv replacing the source's value of its key in place or
// added after the source's keys.
func (f *File) metadata(kvs []KV) (io.Reader, error) {
	if len(kvs) == 0 {
		return io.NewSectionReader(f.f, 0, int64(f.kvEnd)), nil
	}
	w := NewWriter()
	added := map[string]any{}
	for _, kv := range kvs {
		added[kv.Key] = kv.Value
	}
	keys := f.Keys()
	for _, k := range keys {
		if v, ok := added[k]; ok {
			w.AddKV(k, v)
			delete(added, k)
			continue
		}
		v, _ := f.Get(k)
		w.AddKV(k, v)
	}
	for _, kv := range kvs {
		if _, ok := added[kv.Key]; ok {
			w.AddKV(kv.Key, kv.Value)
		}
	}
	if w.err != nil {
		return nil, w.err
	}
	var b bytes.Buffer
	e := &encoder{w: bufio.NewWriter(&b)}
	e.raw([]byte(magic))
	e.u32(f.version)
	e.u64(uint64(len(f.tensors)))
	e.u64(uint64(len(w.keys)))
	for _, k := range w.keys {
		e.str(k)
		e.value(w.values[k])
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return &b, e.err
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

// QuantizeQ8_0 writes a copy of the GGUF at src to dst with every weight matrix
// whose rows are whole Q8_0 blocks quantized to Q8_0, as llama.cpp's quantizer
// quantizes a Q8_0 file's (Convert); vectors, such as norms, stay as they are.
// The tests make their Q8_0 models with it.
func QuantizeQ8_0(src, dst string) error {
	f, err := Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Convert(dst, TypeQ8_0, func(t TensorInfo) bool {
		return len(t.Dims) >= 2 && t.Dims[0]%q8Block == 0 && strings.HasSuffix(t.Name, ".weight")
	})
	return err
}

package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
)

// Writer builds a GGUF file. Metadata and the tensor index are collected in memory;
// each tensor's data is produced by its fill callback while WriteFile streams the file,
// so no more than one tensor's worth of data (whatever the callback buffers) is ever
// held. A Writer is not safe for concurrent use.
//
// AddKV and AddTensor do not return errors, so that building a file reads as a flat
// list; the first invalid call is remembered and returned by WriteFile.
type Writer struct {
	keys    []string
	values  map[string]any
	tensors []pendingTensor
	names   map[string]bool
	err     error
}

type pendingTensor struct {
	info TensorInfo
	fill func(io.Writer) error
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer {
	return &Writer{values: make(map[string]any), names: make(map[string]bool)}
}

func (w *Writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// AddKV appends a metadata pair; pairs are written in the order they are added. The
// value must be one of uint8, int8, uint16, int16, uint32, int32, uint64, int64,
// float32, float64, bool, string, or a slice of one of them (an array). Go's int is
// refused because GGUF readers such as llama.cpp check the exact integer width.
// Setting AlignmentKey (a uint32 power of two) changes the data alignment.
func (w *Writer) AddKV(key string, value any) {
	if _, dup := w.values[key]; dup {
		w.fail(fmt.Errorf("gguf: key %q added twice", key))
		return
	}
	_, isScalar := scalarType(value)
	_, isArray := arrayType(value)
	if !isScalar && !isArray {
		w.fail(fmt.Errorf("gguf: key %q has Go type %T, want a GGUF scalar (uint8..int64, float32, float64, bool, string) or a slice of one", key, value))
		return
	}
	if key == AlignmentKey {
		a, ok := value.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			w.fail(fmt.Errorf("gguf: key %q is %s %v, want a uint32 power of two", key, describe(value), value))
			return
		}
	}
	w.keys = append(w.keys, key)
	w.values[key] = value
}

// AddTensor appends a tensor. dims are in GGUF order (dims[0] is the row length) and
// fill must write exactly the tensor's Bytes() of raw data when WriteFile calls it
// (AppendEncoded produces such bytes). Tensors are laid out in the order they are added.
func (w *Writer) AddTensor(name string, typ GGMLType, dims []uint64, fill func(io.Writer) error) {
	t := TensorInfo{Name: name, Dims: slices.Clone(dims), Type: typ}
	switch {
	case w.names[name]:
		w.fail(fmt.Errorf("gguf: tensor %q added twice", name))
		return
	case name == "" || len(name) > MaxTensorNameLen:
		w.fail(fmt.Errorf("gguf: tensor name %q must be 1 to %d bytes long", name, MaxTensorNameLen))
		return
	case !typ.Known():
		w.fail(fmt.Errorf("gguf: tensor %q has unknown type %s", name, typ))
		return
	case len(dims) > MaxDims:
		w.fail(fmt.Errorf("gguf: tensor %q has %d dimensions; ggml allows at most %d", name, len(dims), MaxDims))
		return
	case fill == nil:
		w.fail(fmt.Errorf("gguf: tensor %q has no fill function", name))
		return
	}
	elems := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 || lo > math.MaxInt64 {
			w.fail(fmt.Errorf("gguf: tensor %q with dims %v has more than 2^63 elements", name, dims))
			return
		}
		elems = lo
	}
	if len(dims) > 0 && dims[0]%typ.BlockSize() != 0 {
		w.fail(fmt.Errorf("gguf: tensor %q of type %s has rows of %d values, not a multiple of the block size %d", name, typ, dims[0], typ.BlockSize()))
		return
	}
	w.names[name] = true
	w.tensors = append(w.tensors, pendingTensor{info: t, fill: fill})
}

// WriteFile writes the file: header, metadata, tensor index, then each tensor's data
// at its aligned offset, every tensor padded to the alignment as ggml pads it. The file
// is written to a temporary name in the same directory and renamed into place, so
// path never holds a partial file; on error the temporary file is removed.
func (w *Writer) WriteFile(path string) error {
	if w.err != nil {
		return w.err
	}
	alignment := uint64(DefaultAlignment)
	if v, ok := w.values[AlignmentKey]; ok {
		alignment = uint64(v.(uint32))
	}
	var offset uint64
	for i := range w.tensors {
		t := &w.tensors[i].info
		t.Offset = offset
		offset += alignUp(t.Bytes(), alignment)
	}

	return writeAtomic(path, func(bw *bufio.Writer) error {
		e := &encoder{w: bw}
		e.raw([]byte(magic))
		e.u32(Version)
		e.u64(uint64(len(w.tensors)))
		e.u64(uint64(len(w.keys)))
		for _, k := range w.keys {
			e.str(k)
			e.value(w.values[k])
		}
		infos := make([]TensorInfo, len(w.tensors))
		for i, p := range w.tensors {
			infos[i] = p.info
		}
		e.tensorIndex(infos)
		e.pad(alignment)
		if e.err != nil {
			return fmt.Errorf("gguf: writing %s: %w", path, e.err)
		}
		for _, p := range w.tensors {
			if err := e.tensorData(path, p.info, alignment, p.fill); err != nil {
				return err
			}
		}
		return nil
	})
}

// tensorIndex writes the tensor index: each tensor's name, dims, type and offset.
func (e *encoder) tensorIndex(tensors []TensorInfo) {
	for _, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
}

// tensorData writes t's data through fill, checks that fill wrote exactly t's
// Bytes(), and pads to the alignment.
func (e *encoder) tensorData(path string, t TensorInfo, alignment uint64, fill func(io.Writer) error) error {
	cw := &countingWriter{w: e.w}
	if err := fill(cw); err != nil {
		return fmt.Errorf("gguf: writing %s: tensor %q: %w", path, t.Name, err)
	}
	if cw.err != nil {
		return fmt.Errorf("gguf: writing %s: tensor %q: %w", path, t.Name, cw.err)
	}
	if want := t.Bytes(); cw.n != want {
		return fmt.Errorf("gguf: writing %s: tensor %q (%s %v): fill wrote %d bytes, want %d",
			path, t.Name, t.Type, t.Dims, cw.n, want)
	}
	e.n += cw.n
	e.pad(alignment)
	if e.err != nil {
		return fmt.Errorf("gguf: writing %s: %w", path, e.err)
	}
	return nil
}

// writeAtomic writes a file through write, into a temporary name in the same
// directory, synced and renamed into place, so that path never holds a partial
// file (a reader sees the old file or the whole new one); on error the temporary
// file is removed.
func writeAtomic(path string, write func(*bufio.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("gguf: writing %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("gguf: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("gguf: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// countingWriter counts what a fill callback writes and keeps the first write error,
// so a callback that ignores errors still fails the file.
type countingWriter struct {
	w   io.Writer
	n   uint64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += uint64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// encoder writes little-endian GGUF fields, keeping the first error so that the header
// can be written as a straight sequence of calls.
type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) raw(p []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(p)
	e.n += uint64(n)
	e.err = err
}

func (e *encoder) u8(v uint8) { e.raw([]byte{v}) }

func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:2], v)
	e.raw(e.buf[:2])
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.raw(e.buf[:4])
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], v)
	e.raw(e.buf[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err == nil {
		n, err := e.w.WriteString(s)
		e.n += uint64(n)
		e.err = err
	}
}

func (e *encoder) pad(alignment uint64) {
	for e.err == nil && e.n%alignment != 0 {
		e.u8(0)
	}
}

func (e *encoder) value(v any) {
	if vt, ok := scalarType(v); ok {
		e.u32(uint32(vt))
		e.scalar(v)
		return
	}
	vt, _ := arrayType(v) // AddKV admitted only scalars and arrays
	e.u32(uint32(valArray))
	e.u32(uint32(vt))
	switch s := v.(type) {
	case []uint8:
		e.u64(uint64(len(s)))
		e.raw(s)
	case []int8:
		writeArray(e, s)
	case []uint16:
		writeArray(e, s)
	case []int16:
		writeArray(e, s)
	case []uint32:
		writeArray(e, s)
	case []int32:
		writeArray(e, s)
	case []float32:
		writeArray(e, s)
	case []bool:
		writeArray(e, s)
	case []string:
		writeArray(e, s)
	case []uint64:
		writeArray(e, s)
	case []int64:
		writeArray(e, s)
	case []float64:
		writeArray(e, s)
	default:
		e.err = errors.New("unreachable: unsupported array type")
	}
}

func writeArray[T any](e *encoder, s []T) {
	e.u64(uint64(len(s)))
	for _, x := range s {
		e.scalar(x)
	}
}

func (e *encoder) scalar(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case string:
		e.str(x)
	default:
		e.err = fmt.Errorf("unreachable: unsupported scalar %T", v)
	}
}

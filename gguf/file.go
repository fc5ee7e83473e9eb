package gguf

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// Format constants shared by the reader and the writer.
const (
	magic = "GGUF"
	// Version is the GGUF version this package writes. Open also reads version 2,
	// whose layout is identical for little-endian files.
	Version = 3
	// AlignmentKey holds the data alignment when it is not DefaultAlignment.
	AlignmentKey = "general.alignment"
	// DefaultAlignment is the alignment of the tensor data section and of every
	// tensor in it when the file has no AlignmentKey.
	DefaultAlignment = 32
	// MaxDims is the most dimensions a tensor may have (ggml's GGML_MAX_DIMS).
	MaxDims = 4
	// MaxTensorNameLen is the longest tensor name ggml accepts (GGML_MAX_NAME less
	// the terminating NUL); longer names make llama.cpp refuse the file.
	MaxTensorNameLen = 63
)

// Errors that callers can test for with errors.Is.
var (
	// ErrNotFound is wrapped by accessors when the key or tensor does not exist.
	ErrNotFound = errors.New("not found")
	// ErrFormat is wrapped by every error about a malformed, truncated or
	// unsupported file.
	ErrFormat = errors.New("invalid GGUF file")
)

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name string
	// Dims are in GGUF order: Dims[0] (ggml's ne0) is the contiguous row length.
	Dims []uint64
	Type GGMLType
	// Offset is the position of the tensor's data relative to the start of the
	// file's data section.
	Offset uint64
}

// Elements is the number of values in the tensor (1 for a tensor with no dims).
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Bytes is the size of the tensor's data. It is 0 for an unknown type.
func (t TensorInfo) Bytes() uint64 {
	bs := t.Type.BlockSize()
	if bs == 0 {
		return 0
	}
	return t.Elements() / bs * t.Type.TypeSize()
}

// File is an open GGUF file. Its metadata and tensor index are in memory; tensor data
// is read from disk on demand. After Open returns, all methods are safe for concurrent
// use (tensor reads use ReadAt), except Close.
type File struct {
	path       string
	f          *os.File
	version    uint32
	keys       []string
	values     map[string]any
	tensors    []TensorInfo
	tensorIdx  map[string]int
	alignment  uint64
	dataOffset uint64
	size       uint64
	// kvEnd is the file position where the metadata ends and the tensor index
	// begins: Convert copies the bytes before it unchanged.
	kvEnd uint64
}

// Open parses the header, metadata and tensor index of the GGUF file at path. It does
// not read tensor data. Everything the index promises is checked against the file's
// size, so a truncated file fails here rather than on a later tensor read.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("gguf: %w", err)
	}
	file := &File{
		path:      path,
		f:         f,
		values:    make(map[string]any),
		tensorIdx: make(map[string]int),
		size:      uint64(st.Size()),
	}
	d := &decoder{r: bufio.NewReaderSize(f, 1<<20), size: file.size}
	if err := file.parse(d); err != nil {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	return file, nil
}

// Close closes the underlying file. Section readers from TensorReader stop working.
func (f *File) Close() error {
	return f.f.Close()
}

// Version is the file's GGUF version.
func (f *File) Version() uint32 { return f.version }

// Alignment is the data alignment in bytes (general.alignment, default 32).
func (f *File) Alignment() uint64 { return f.alignment }

// DataOffset is the absolute file position of the tensor data section.
func (f *File) DataOffset() uint64 { return f.dataOffset }

func (f *File) parse(d *decoder) error {
	head, err := d.bytes(4, "magic")
	if err != nil {
		return err
	}
	if string(head) != magic {
		return fmt.Errorf("%w: magic is %q, want %q (not a GGUF file)", ErrFormat, head, magic)
	}
	if f.version, err = d.u32("version"); err != nil {
		return err
	}
	switch {
	case f.version&0xffff == 0:
		return fmt.Errorf("%w: version field is %#x: a big-endian GGUF file, only little-endian is supported", ErrFormat, f.version)
	case f.version != 2 && f.version != 3:
		return fmt.Errorf("%w: GGUF version %d is not supported (want 2 or 3)", ErrFormat, f.version)
	}
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return err
	}
	nKV, err := d.u64("metadata count")
	if err != nil {
		return err
	}
	// Each pair takes at least a key length (8), a type (4) and a 1-byte value; each
	// tensor info at least a name length (8), a dim count (4), a type (4) and an
	// offset (8). A count that cannot fit in the file is corruption, refused before
	// anything is allocated for it.
	if nKV > d.remaining()/13 {
		return fmt.Errorf("%w: metadata count %d cannot fit in the %d bytes left in the file", ErrFormat, nKV, d.remaining())
	}
	if nTensors > d.remaining()/24 {
		return fmt.Errorf("%w: tensor count %d cannot fit in the %d bytes left in the file", ErrFormat, nTensors, d.remaining())
	}

	f.keys = make([]string, 0, nKV)
	for i := range nKV {
		key, err := d.str(fmt.Sprintf("key of metadata pair %d", i))
		if err != nil {
			return err
		}
		if _, dup := f.values[key]; dup {
			return fmt.Errorf("%w: duplicate metadata key %q", ErrFormat, key)
		}
		v, err := d.value(key)
		if err != nil {
			return err
		}
		f.keys = append(f.keys, key)
		f.values[key] = v
	}

	f.kvEnd = d.pos
	f.alignment = DefaultAlignment
	if v, ok := f.values[AlignmentKey]; ok {
		a, isU32 := v.(uint32)
		if !isU32 {
			return fmt.Errorf("%w: key %q is %s, want uint32", ErrFormat, AlignmentKey, describe(v))
		}
		if a == 0 || a&(a-1) != 0 {
			return fmt.Errorf("%w: key %q is %d, want a power of two", ErrFormat, AlignmentKey, a)
		}
		f.alignment = uint64(a)
	}

	f.tensors = make([]TensorInfo, 0, nTensors)
	for i := range nTensors {
		t, err := d.tensorInfo(i)
		if err != nil {
			return err
		}
		if _, dup := f.tensorIdx[t.Name]; dup {
			return fmt.Errorf("%w: duplicate tensor name %q", ErrFormat, t.Name)
		}
		f.tensorIdx[t.Name] = len(f.tensors)
		f.tensors = append(f.tensors, t)
	}

	f.dataOffset = alignUp(d.pos, f.alignment)
	var dataSize uint64
	if f.size > f.dataOffset {
		dataSize = f.size - f.dataOffset
	}
	for _, t := range f.tensors {
		if t.Offset%f.alignment != 0 {
			return fmt.Errorf("%w: tensor %q has data offset %d, not a multiple of the alignment %d", ErrFormat, t.Name, t.Offset, f.alignment)
		}
		if t.Offset > dataSize || t.Bytes() > dataSize-t.Offset {
			return fmt.Errorf("%w: tensor %q needs data bytes [%d, %d) but the data section holds %d bytes (file truncated?)",
				ErrFormat, t.Name, t.Offset, t.Offset+t.Bytes(), dataSize)
		}
	}
	return nil
}

// Keys returns the metadata keys in file order.
func (f *File) Keys() []string {
	return slices.Clone(f.keys)
}

// Get returns a metadata value as stored: uint8, int8, uint16, int16, uint32, int32,
// uint64, int64, float32, float64, bool or string, or a slice of one of those for an
// array. Slices are copies, so callers may modify them.
func (f *File) Get(key string) (any, bool) {
	v, ok := f.values[key]
	if !ok {
		return nil, false
	}
	switch s := v.(type) {
	case []uint8:
		return slices.Clone(s), true
	case []int8:
		return slices.Clone(s), true
	case []uint16:
		return slices.Clone(s), true
	case []int16:
		return slices.Clone(s), true
	case []uint32:
		return slices.Clone(s), true
	case []int32:
		return slices.Clone(s), true
	case []uint64:
		return slices.Clone(s), true
	case []int64:
		return slices.Clone(s), true
	case []float32:
		return slices.Clone(s), true
	case []float64:
		return slices.Clone(s), true
	case []bool:
		return slices.Clone(s), true
	case []string:
		return slices.Clone(s), true
	}
	return v, true
}

func (f *File) lookup(key string) (any, error) {
	v, ok := f.values[key]
	if !ok {
		return nil, fmt.Errorf("gguf: key %q: %w", key, ErrNotFound)
	}
	return v, nil
}

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("gguf: key %q is %s, want string", key, describe(v))
	}
	return s, nil
}

// Uint32 returns an integer value of any integer type whose value fits in a uint32:
// writers disagree on integer widths (llama.cpp wants uint32, others write int32 or
// uint64), and the value, not its encoding, is what matters to a reader.
func (f *File) Uint32(key string) (uint32, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	n, isInt, fits := integerValue(v, 0, math.MaxUint32)
	switch {
	case !isInt:
		return 0, fmt.Errorf("gguf: key %q is %s, want an unsigned integer", key, describe(v))
	case !fits:
		return 0, fmt.Errorf("gguf: key %q is %s %v, which does not fit in a uint32", key, describe(v), v)
	}
	return uint32(n), nil
}

// Float32 returns a float32 or float64 value as a float32.
func (f *File) Float32(key string) (float32, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case float32:
		return x, nil
	case float64:
		if !math.IsInf(x, 0) && !math.IsNaN(x) && math.Abs(x) > math.MaxFloat32 {
			return 0, fmt.Errorf("gguf: key %q is float64 %g, which does not fit in a float32", key, x)
		}
		return float32(x), nil
	}
	return 0, fmt.Errorf("gguf: key %q is %s, want float32 or float64", key, describe(v))
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.lookup(key)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("gguf: key %q is %s, want bool", key, describe(v))
	}
	return b, nil
}

// Strings returns a copy of a string array value.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.([]string)
	if !ok {
		return nil, fmt.Errorf("gguf: key %q is %s, want string array", key, describe(v))
	}
	return slices.Clone(s), nil
}

// Int32s returns an integer array of any integer element type whose values all fit in
// an int32 (token types are int32 in llama.cpp's files, but not in every writer's).
func (f *File) Int32s(key string) ([]int32, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	switch s := v.(type) {
	case []int32:
		return slices.Clone(s), nil
	case []uint8:
		return convertInts(key, s)
	case []int8:
		return convertInts(key, s)
	case []uint16:
		return convertInts(key, s)
	case []int16:
		return convertInts(key, s)
	case []uint32:
		return convertInts(key, s)
	case []uint64:
		return convertInts(key, s)
	case []int64:
		return convertInts(key, s)
	}
	return nil, fmt.Errorf("gguf: key %q is %s, want an integer array", key, describe(v))
}

type integer interface {
	~uint8 | ~int8 | ~uint16 | ~int16 | ~uint32 | ~int32 | ~uint64 | ~int64
}

func convertInts[T integer](key string, s []T) ([]int32, error) {
	out := make([]int32, len(s))
	for i, x := range s {
		n, _, fits := integerValue(x, math.MinInt32, math.MaxInt32)
		if !fits {
			return nil, fmt.Errorf("gguf: key %q: element %d is %v, which does not fit in an int32", key, i, x)
		}
		out[i] = int32(n)
	}
	return out, nil
}

// integerValue reports whether v is an integer and whether it lies in [lo, hi]; if so
// it returns it as an int64 (every bound used here fits in one).
func integerValue(v any, lo, hi int64) (n int64, isInt, fits bool) {
	var u uint64
	switch x := v.(type) {
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case uint8:
		u = uint64(x)
	case uint16:
		u = uint64(x)
	case uint32:
		u = uint64(x)
	case uint64:
		u = x
	default:
		return 0, false, false
	}
	switch v.(type) {
	case uint8, uint16, uint32, uint64:
		if u > math.MaxInt64 {
			return 0, true, false
		}
		n = int64(u)
	}
	return n, true, n >= lo && n <= hi
}

// Tensors returns the tensor index in file order.
func (f *File) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(f.tensors))
	for i, t := range f.tensors {
		t.Dims = slices.Clone(t.Dims)
		out[i] = t
	}
	return out
}

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensorIdx[name]
	if !ok {
		return TensorInfo{}, false
	}
	t := f.tensors[i]
	t.Dims = slices.Clone(t.Dims)
	return t, true
}

// TensorReader returns a reader over the raw bytes of t, which must come from this
// file's index.
func (f *File) TensorReader(t TensorInfo) *io.SectionReader {
	return io.NewSectionReader(f.f, int64(f.dataOffset+t.Offset), int64(t.Bytes()))
}

// TensorFloat64 reads a whole tensor and dequantises it (see Decode for the supported
// types). Values are in storage order: row after row of Dims[0] values.
func (f *File) TensorFloat64(name string) ([]float64, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: tensor %q: %w", name, ErrNotFound)
	}
	switch t.Type {
	case TypeF32, TypeF16, TypeBF16, TypeF64, TypeQ8_0:
	default:
		return nil, fmt.Errorf("gguf: tensor %q has type %s; dequantising supports F32, F16, BF16, F64 and Q8_0", name, t.Type)
	}
	buf := make([]byte, t.Bytes())
	if _, err := io.ReadFull(f.TensorReader(t), buf); err != nil {
		return nil, fmt.Errorf("gguf: reading tensor %q: %w", name, err)
	}
	vals, err := Decode(t.Type, buf)
	if err != nil {
		return nil, fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	return vals, nil
}

func alignUp(n, a uint64) uint64 {
	return (n + a - 1) / a * a
}

package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
)

// decoder reads the little-endian header of a GGUF file, tracking its position so
// every length can be checked against the bytes that remain.
type decoder struct {
	r       *bufio.Reader
	pos     uint64
	size    uint64
	buf     [8]byte
	scratch []byte
}

func (d *decoder) remaining() uint64 {
	if d.pos >= d.size {
		return 0
	}
	return d.size - d.pos
}

func (d *decoder) fill(p []byte, what string) error {
	n, err := io.ReadFull(d.r, p)
	d.pos += uint64(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: reading %s at byte %d: %w", ErrFormat, what, d.pos, err)
	}
	return nil
}

func (d *decoder) bytes(n uint64, what string) ([]byte, error) {
	if n > d.remaining() {
		return nil, fmt.Errorf("%w: %s needs %d bytes but only %d are left in the file (truncated or corrupt)", ErrFormat, what, n, d.remaining())
	}
	p := make([]byte, n)
	return p, d.fill(p, what)
}

func (d *decoder) u32(what string) (uint32, error) {
	if err := d.fill(d.buf[:4], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(d.buf[:4]), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	if err := d.fill(d.buf[:8], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(d.buf[:8]), nil
}

func (d *decoder) str(what string) (string, error) {
	n, err := d.u64(what)
	if err != nil {
		return "", err
	}
	if n > d.remaining() {
		return "", fmt.Errorf("%w: %s needs %d bytes but only %d are left in the file (truncated or corrupt)", ErrFormat, what, n, d.remaining())
	}
	// Strings are read through one reused buffer: a vocabulary is 300k small strings,
	// and this halves the allocations of opening a model.
	if uint64(cap(d.scratch)) < n {
		d.scratch = make([]byte, n)
	}
	p := d.scratch[:n]
	if err := d.fill(p, what); err != nil {
		return "", err
	}
	return string(p), nil
}

func (d *decoder) value(key string) (any, error) {
	what := fmt.Sprintf("value of key %q", key)
	t, err := d.u32(what + " (type)")
	if err != nil {
		return nil, err
	}
	vt := valueType(t)
	if vt == valArray {
		return d.array(key)
	}
	if vt.size() == 0 {
		return nil, fmt.Errorf("%w: key %q has invalid value type %d", ErrFormat, key, t)
	}
	return d.scalar(vt, what)
}

func (d *decoder) scalar(vt valueType, what string) (any, error) {
	if vt == valString {
		return d.str(what)
	}
	p := d.buf[:vt.size()]
	if err := d.fill(p, what); err != nil {
		return nil, err
	}
	switch vt {
	case valUint8:
		return p[0], nil
	case valInt8:
		return int8(p[0]), nil
	case valBool:
		// ggml reads any non-zero byte as true; so do we, rather than refuse a file
		// llama.cpp accepts.
		return p[0] != 0, nil
	case valUint16:
		return binary.LittleEndian.Uint16(p), nil
	case valInt16:
		return int16(binary.LittleEndian.Uint16(p)), nil
	case valUint32:
		return binary.LittleEndian.Uint32(p), nil
	case valInt32:
		return int32(binary.LittleEndian.Uint32(p)), nil
	case valFloat32:
		return math.Float32frombits(binary.LittleEndian.Uint32(p)), nil
	case valUint64:
		return binary.LittleEndian.Uint64(p), nil
	case valInt64:
		return int64(binary.LittleEndian.Uint64(p)), nil
	case valFloat64:
		return math.Float64frombits(binary.LittleEndian.Uint64(p)), nil
	}
	panic("unreachable: scalar type " + vt.String())
}

func (d *decoder) array(key string) (any, error) {
	what := fmt.Sprintf("array value of key %q", key)
	t, err := d.u32(what + " (element type)")
	if err != nil {
		return nil, err
	}
	vt := valueType(t)
	if vt == valArray {
		return nil, fmt.Errorf("%w: key %q is an array of arrays, which ggml does not support", ErrFormat, key)
	}
	if vt.size() == 0 {
		return nil, fmt.Errorf("%w: key %q is an array of invalid value type %d", ErrFormat, key, t)
	}
	n, err := d.u64(what + " (length)")
	if err != nil {
		return nil, err
	}
	if n > d.remaining()/vt.size() {
		return nil, fmt.Errorf("%w: key %q: an array of %d %s values needs at least %d bytes but only %d are left in the file",
			ErrFormat, key, n, vt, mulSat(n, vt.size()), d.remaining())
	}
	switch vt {
	case valString:
		// The length check above allows up to remaining/8 strings; grow the slice as
		// they are read instead of trusting n for the allocation.
		out := make([]string, 0, min(n, 1<<16))
		for i := range n {
			s, err := d.str(what)
			if err != nil {
				return nil, fmt.Errorf("%w (element %d)", err, i)
			}
			out = append(out, s)
		}
		return out, nil
	case valUint8:
		return d.bytes(n, what)
	case valInt8:
		return readArray(d, n, 1, what, func(p []byte) int8 { return int8(p[0]) })
	case valBool:
		return readArray(d, n, 1, what, func(p []byte) bool { return p[0] != 0 })
	case valUint16:
		return readArray(d, n, 2, what, binary.LittleEndian.Uint16)
	case valInt16:
		return readArray(d, n, 2, what, func(p []byte) int16 { return int16(binary.LittleEndian.Uint16(p)) })
	case valUint32:
		return readArray(d, n, 4, what, binary.LittleEndian.Uint32)
	case valInt32:
		return readArray(d, n, 4, what, func(p []byte) int32 { return int32(binary.LittleEndian.Uint32(p)) })
	case valFloat32:
		return readArray(d, n, 4, what, func(p []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(p)) })
	case valUint64:
		return readArray(d, n, 8, what, binary.LittleEndian.Uint64)
	case valInt64:
		return readArray(d, n, 8, what, func(p []byte) int64 { return int64(binary.LittleEndian.Uint64(p)) })
	case valFloat64:
		return readArray(d, n, 8, what, func(p []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(p)) })
	}
	panic("unreachable: array element type " + vt.String())
}

// readArray reads n fixed-size elements in chunks, so the only large allocation is the
// result, whose size the caller has already checked against the file.
func readArray[T any](d *decoder, n, size uint64, what string, conv func([]byte) T) ([]T, error) {
	out := make([]T, n)
	chunk := make([]byte, min(n*size, 64<<10))
	for i := uint64(0); i < n; {
		m := min(n-i, uint64(len(chunk))/size)
		p := chunk[:m*size]
		if err := d.fill(p, what); err != nil {
			return nil, err
		}
		for j := range m {
			out[i+j] = conv(p[j*size:])
		}
		i += m
	}
	return out, nil
}

func (d *decoder) tensorInfo(i uint64) (TensorInfo, error) {
	var t TensorInfo
	name, err := d.str(fmt.Sprintf("name of tensor %d", i))
	if err != nil {
		return t, err
	}
	t.Name = name
	if len(name) > MaxTensorNameLen {
		return t, fmt.Errorf("%w: tensor %d name %q is %d bytes long; ggml allows at most %d", ErrFormat, i, name, len(name), MaxTensorNameLen)
	}
	nDims, err := d.u32(fmt.Sprintf("dimension count of tensor %q", name))
	if err != nil {
		return t, err
	}
	if nDims > MaxDims {
		return t, fmt.Errorf("%w: tensor %q has %d dimensions; ggml allows at most %d", ErrFormat, name, nDims, MaxDims)
	}
	t.Dims = make([]uint64, nDims)
	elems := uint64(1)
	for j := range t.Dims {
		dim, err := d.u64(fmt.Sprintf("dimension %d of tensor %q", j, name))
		if err != nil {
			return t, err
		}
		if dim > math.MaxInt64 {
			return t, fmt.Errorf("%w: tensor %q dimension %d is %d, which is negative as ggml's int64", ErrFormat, name, j, int64(dim))
		}
		t.Dims[j] = dim
		hi, lo := bits.Mul64(elems, dim)
		if hi != 0 || lo > math.MaxInt64 {
			return t, fmt.Errorf("%w: tensor %q with dims %v has more than 2^63 elements", ErrFormat, name, t.Dims[:j+1])
		}
		elems = lo
	}
	typ, err := d.u32(fmt.Sprintf("type of tensor %q", name))
	if err != nil {
		return t, err
	}
	t.Type = GGMLType(typ)
	if !t.Type.Known() {
		return t, fmt.Errorf("%w: tensor %q has unknown ggml type %d", ErrFormat, name, typ)
	}
	rowLen := uint64(1)
	if len(t.Dims) > 0 {
		rowLen = t.Dims[0]
	}
	if rowLen%t.Type.BlockSize() != 0 {
		return t, fmt.Errorf("%w: tensor %q of type %s has rows of %d values, not a multiple of the block size %d",
			ErrFormat, name, t.Type, rowLen, t.Type.BlockSize())
	}
	if t.Offset, err = d.u64(fmt.Sprintf("data offset of tensor %q", name)); err != nil {
		return t, err
	}
	return t, nil
}

// mulSat multiplies without overflowing, saturating at the largest uint64; it is only
// used to report sizes in error messages.
func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

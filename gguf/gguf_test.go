package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// rawFile assembles GGUF bytes by hand, so tests can state the exact layout and build
// files the Writer would refuse to produce.
type rawFile struct{ bytes.Buffer }

func (r *rawFile) u32(v uint32) *rawFile {
	r.Write(binary.LittleEndian.AppendUint32(nil, v))
	return r
}

func (r *rawFile) u64(v uint64) *rawFile {
	r.Write(binary.LittleEndian.AppendUint64(nil, v))
	return r
}

func (r *rawFile) str(s string) *rawFile {
	r.u64(uint64(len(s)))
	r.WriteString(s)
	return r
}

func (r *rawFile) header(version uint32, nTensors, nKV uint64) *rawFile {
	r.WriteString("GGUF")
	return r.u32(version).u64(nTensors).u64(nKV)
}

func (r *rawFile) pad(a int) *rawFile {
	for r.Len()%a != 0 {
		r.WriteByte(0)
	}
	return r
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.gguf")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustEncode(t *testing.T, typ GGMLType, v []float32) []byte {
	t.Helper()
	b, err := AppendEncoded(nil, typ, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func bytesFill(b []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}
}

func writeAndOpen(t *testing.T, w *Writer) (*File, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f, p
}

// TestWriterExactBytes pins the on-disk layout against a hand-assembled file: header,
// one uint32 pair, one F32 tensor index entry, padding to 32, data, padding to 32.
func TestWriterExactBytes(t *testing.T) {
	w := NewWriter()
	w.AddKV("a", uint32(7))
	w.AddTensor("t", TypeF32, []uint64{2}, bytesFill(mustEncode(t, TypeF32, []float32{1, 2})))
	p := filepath.Join(t.TempDir(), "x.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}

	var want rawFile
	want.header(3, 1, 1)
	want.str("a").u32(4).u32(7)                            // key, UINT32, value
	want.str("t").u32(1).u64(2).u32(0).u64(0)              // name, n_dims, ne0, F32, offset
	want.pad(32)                                           // data section starts at 96
	want.u32(math.Float32bits(1)).u32(math.Float32bits(2)) // data
	want.pad(32)                                           // tensor padded as ggml pads it
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("file bytes differ\n got %x\nwant %x", got, want.Bytes())
	}
	if len(got) != 128 {
		t.Fatalf("file is %d bytes, want 128", len(got))
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("file mode %v, want 0644", fi.Mode().Perm())
	}
}

func TestRoundTripValues(t *testing.T) {
	values := []struct {
		key string
		val any
	}{
		{"u8", uint8(200)},
		{"i8", int8(-100)},
		{"u16", uint16(65000)},
		{"i16", int16(-32000)},
		{"u32", uint32(4_000_000_000)},
		{"i32", int32(-2_000_000_000)},
		{"u64", uint64(math.MaxUint64)},
		{"i64", int64(math.MinInt64)},
		{"f32", float32(1e-6)},
		{"f64", math.Inf(-1)},
		{"bool.t", true},
		{"bool.f", false},
		{"str", "héllo, 世界\x00end"},
		{"str.empty", ""},
		{"a.u8", []uint8{0, 1, 255}},
		{"a.i8", []int8{-128, 0, 127}},
		{"a.u16", []uint16{0, 65535}},
		{"a.i16", []int16{-32768, 32767}},
		{"a.u32", []uint32{0, math.MaxUint32}},
		{"a.i32", []int32{math.MinInt32, -1, 0, math.MaxInt32}},
		{"a.u64", []uint64{0, math.MaxUint64}},
		{"a.i64", []int64{math.MinInt64, math.MaxInt64}},
		{"a.f32", []float32{-1.5, 0, float32(math.Inf(1)), math.SmallestNonzeroFloat32}},
		{"a.f64", []float64{math.Pi, math.Copysign(0, -1), math.MaxFloat64}},
		{"a.bool", []bool{true, false, true}},
		{"a.str", []string{"Ġthe", "", "<|endoftext|>"}},
		{"a.empty", []string{}},
	}
	w := NewWriter()
	var wantKeys []string
	for _, v := range values {
		w.AddKV(v.key, v.val)
		wantKeys = append(wantKeys, v.key)
	}
	f, _ := writeAndOpen(t, w)
	if got := f.Keys(); !reflect.DeepEqual(got, wantKeys) {
		t.Fatalf("Keys() = %q, want %q", got, wantKeys)
	}
	for _, v := range values {
		t.Run(v.key, func(t *testing.T) {
			got, ok := f.Get(v.key)
			if !ok {
				t.Fatalf("Get(%q) missing", v.key)
			}
			// %#v prints floats' sign and every digit, so a lost negative zero (which
			// DeepEqual's == takes for 0) shows as well.
			if !reflect.DeepEqual(got, v.val) || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", v.val) {
				t.Fatalf("Get(%q) = %#v (%T), want %#v (%T)", v.key, got, got, v.val, v.val)
			}
		})
	}
	if _, ok := f.Get("absent"); ok {
		t.Error(`Get("absent") reported ok`)
	}
	// Get hands out copies: changing one must not change the file's value.
	s, _ := f.Get("a.str")
	s.([]string)[0] = "changed"
	if again, _ := f.Strings("a.str"); again[0] != "Ġthe" {
		t.Errorf("mutating Get's slice changed the stored value to %q", again[0])
	}
}

func TestTypedAccessors(t *testing.T) {
	w := NewWriter()
	w.AddKV("u8", uint8(7))
	w.AddKV("i8.neg", int8(-1))
	w.AddKV("i32", int32(12))
	w.AddKV("u64.big", uint64(1)<<32)
	w.AddKV("i64", int64(4096))
	w.AddKV("f32", float32(0.25))
	w.AddKV("f64", float64(1e6))
	w.AddKV("f64.huge", 1e300)
	w.AddKV("str", "qwen3")
	w.AddKV("bool", true)
	w.AddKV("a.str", []string{"x", "y"})
	w.AddKV("a.i32", []int32{1, -2})
	w.AddKV("a.u8", []uint8{3, 4})
	w.AddKV("a.u32.big", []uint32{1, math.MaxUint32})
	w.AddKV("a.i64", []int64{-5, 6})
	f, _ := writeAndOpen(t, w)

	type result struct {
		val any
		err string // substring; "" means success
	}
	tests := []struct {
		name string
		call func() (any, error)
		want result
	}{
		{"Uint32 from uint8", func() (any, error) { return f.Uint32("u8") }, result{uint32(7), ""}},
		{"Uint32 from int32", func() (any, error) { return f.Uint32("i32") }, result{uint32(12), ""}},
		{"Uint32 from int64", func() (any, error) { return f.Uint32("i64") }, result{uint32(4096), ""}},
		{"Uint32 negative", func() (any, error) { return f.Uint32("i8.neg") }, result{nil, `key "i8.neg" is int8 -1, which does not fit in a uint32`}},
		{"Uint32 too big", func() (any, error) { return f.Uint32("u64.big") }, result{nil, `key "u64.big" is uint64 4294967296, which does not fit`}},
		{"Uint32 from string", func() (any, error) { return f.Uint32("str") }, result{nil, `key "str" is string, want an unsigned integer`}},
		{"Uint32 missing", func() (any, error) { return f.Uint32("nope") }, result{nil, `key "nope": not found`}},
		{"Float32 from f32", func() (any, error) { return f.Float32("f32") }, result{float32(0.25), ""}},
		{"Float32 from f64", func() (any, error) { return f.Float32("f64") }, result{float32(1e6), ""}},
		{"Float32 overflow", func() (any, error) { return f.Float32("f64.huge") }, result{nil, `key "f64.huge" is float64 1e+300, which does not fit in a float32`}},
		{"Float32 from int", func() (any, error) { return f.Float32("i32") }, result{nil, `key "i32" is int32, want float32 or float64`}},
		{"String", func() (any, error) { return f.String("str") }, result{"qwen3", ""}},
		{"String from array", func() (any, error) { return f.String("a.str") }, result{nil, `key "a.str" is string array, want string`}},
		{"Bool", func() (any, error) { return f.Bool("bool") }, result{true, ""}},
		{"Bool from u8", func() (any, error) { return f.Bool("u8") }, result{nil, `key "u8" is uint8, want bool`}},
		{"Strings", func() (any, error) { return f.Strings("a.str") }, result{[]string{"x", "y"}, ""}},
		{"Strings from int array", func() (any, error) { return f.Strings("a.i32") }, result{nil, `key "a.i32" is int32 array, want string array`}},
		{"Int32s", func() (any, error) { return f.Int32s("a.i32") }, result{[]int32{1, -2}, ""}},
		{"Int32s from u8", func() (any, error) { return f.Int32s("a.u8") }, result{[]int32{3, 4}, ""}},
		{"Int32s from i64", func() (any, error) { return f.Int32s("a.i64") }, result{[]int32{-5, 6}, ""}},
		{"Int32s overflow", func() (any, error) { return f.Int32s("a.u32.big") }, result{nil, `key "a.u32.big": element 1 is 4294967295, which does not fit in an int32`}},
		{"Int32s from strings", func() (any, error) { return f.Int32s("a.str") }, result{nil, `key "a.str" is string array, want an integer array`}},
		{"Int32s missing", func() (any, error) { return f.Int32s("nope") }, result{nil, "not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.call()
			if tt.want.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want.err) {
					t.Fatalf("error = %v, want one containing %q", err, tt.want.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want.val) {
				t.Fatalf("got %#v, want %#v", got, tt.want.val)
			}
		})
	}
	if _, err := f.String("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing key error %v does not wrap ErrNotFound", err)
	}
}

// TestRoundTripTensors writes one tensor of every type the package encodes, plus raw
// bytes of a type it only indexes (Q4_K), and reads them back three ways: index, raw
// bytes, dequantised values.
func TestRoundTripTensors(t *testing.T) {
	// Values exactly representable in every type, Q8_0 included: the block maximum is
	// 127 so d = 1 and every value is an integer quant.
	exact := make([]float32, 64)
	for i := range exact {
		exact[i] = float32((i*37)%255 - 127)
	}
	q4k := bytes.Repeat([]byte{0xAB}, 144) // one Q4_K block of 256 values
	tensors := []struct {
		name string
		typ  GGMLType
		dims []uint64
		data []byte
		want []float64 // nil: decoding must fail
	}{
		{"f32", TypeF32, []uint64{8, 8}, mustEncode(t, TypeF32, exact), f64s(exact)},
		{"f16", TypeF16, []uint64{16, 2, 2}, mustEncode(t, TypeF16, exact), f64s(exact)},
		{"bf16", TypeBF16, []uint64{64}, mustEncode(t, TypeBF16, exact), f64s(exact)},
		{"f64", TypeF64, []uint64{32, 2}, mustEncode(t, TypeF64, exact), f64s(exact)},
		{"q8_0", TypeQ8_0, []uint64{32, 2}, mustEncode(t, TypeQ8_0, exact), f64s(exact)},
		{"q4_k", TypeQ4_K, []uint64{256}, q4k, nil},
		{"blk.0.a_name_that_is_exactly_sixty_three_bytes_long_0123456789", TypeF32, []uint64{1}, mustEncode(t, TypeF32, []float32{-3}), []float64{-3}},
	}
	for _, alignment := range []uint32{32, 64} {
		w := NewWriter()
		if alignment != DefaultAlignment {
			w.AddKV(AlignmentKey, alignment)
		}
		for _, tt := range tensors {
			w.AddTensor(tt.name, tt.typ, tt.dims, bytesFill(tt.data))
		}
		f, _ := writeAndOpen(t, w)
		if f.Alignment() != uint64(alignment) || f.DataOffset()%uint64(alignment) != 0 {
			t.Fatalf("alignment %d, data offset %d; want alignment %d", f.Alignment(), f.DataOffset(), alignment)
		}
		if got := len(f.Tensors()); got != len(tensors) {
			t.Fatalf("%d tensors, want %d", got, len(tensors))
		}
		var offset uint64
		for i, tt := range tensors {
			info, ok := f.Tensor(tt.name)
			if !ok {
				t.Fatalf("tensor %q missing", tt.name)
			}
			if f.Tensors()[i].Name != tt.name {
				t.Errorf("tensor %d is %q, want %q (file order)", i, f.Tensors()[i].Name, tt.name)
			}
			if info.Type != tt.typ || !reflect.DeepEqual(info.Dims, tt.dims) || info.Offset != offset {
				t.Errorf("%s: got %s %v at %d, want %s %v at %d", tt.name, info.Type, info.Dims, info.Offset, tt.typ, tt.dims, offset)
			}
			if info.Bytes() != uint64(len(tt.data)) {
				t.Errorf("%s: Bytes() = %d, want %d", tt.name, info.Bytes(), len(tt.data))
			}
			offset += alignUp(uint64(len(tt.data)), uint64(alignment))
			raw, err := io.ReadAll(f.TensorReader(info))
			if err != nil || !bytes.Equal(raw, tt.data) {
				t.Errorf("%s: raw bytes differ (err %v)", tt.name, err)
			}
			vals, err := f.TensorFloat64(tt.name)
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), `tensor "q4_k" has type Q4_K`) {
					t.Errorf("%s: TensorFloat64 error = %v, want an unsupported-type error naming it", tt.name, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if !reflect.DeepEqual(vals, tt.want) {
				t.Errorf("%s: values = %v, want %v", tt.name, vals, tt.want)
			}
		}
		if _, err := f.TensorFloat64("absent"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"absent"`) {
			t.Errorf("TensorFloat64(absent) = %v, want ErrNotFound naming it", err)
		}
	}
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// TestDecodeHandComputed checks dequantisation of hand-assembled bit patterns.
func TestDecodeHandComputed(t *testing.T) {
	le16 := func(v ...uint16) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint16(b, x)
		}
		return b
	}
	q8 := func(d uint16, qs ...int8) []byte {
		b := le16(d)
		for j := range 32 {
			var q int8
			if j < len(qs) {
				q = qs[j]
			}
			b = append(b, byte(q))
		}
		return b
	}
	zeros := func(n int) []float64 { return make([]float64, n) }
	tests := []struct {
		name string
		typ  GGMLType
		data []byte
		want []float64
	}{
		// F16: 1, -2, 0x3555 = (1+341/1024)/4, smallest subnormal 2^-24, largest 65504, -0.
		{"f16", TypeF16, le16(0x3C00, 0xC000, 0x3555, 0x0001, 0x7BFF, 0x8000),
			[]float64{1, -2, 0.333251953125, 5.9604644775390625e-08, 65504, math.Copysign(0, -1)}},
		// BF16: 1, -5, 0x3EAB = (1+43/128)/4.
		{"bf16", TypeBF16, le16(0x3F80, 0xC0A0, 0x3EAB), []float64{1, -5, 0.333984375}},
		// Q8_0 block 1: d = 0x3800 = 0.5; block 2: d = 0x2E66 = (1+614/1024)/16.
		{"q8_0", TypeQ8_0, append(q8(0x3800, 1, -1, 127, -128), q8(0x2E66, 3, -10)...),
			append(append([]float64{0.5, -0.5, 63.5, -64}, zeros(28)...),
				append([]float64{3 * 0.0999755859375, -10 * 0.0999755859375}, zeros(30)...)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.typ, tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%d values, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] || math.Signbit(got[i]) != math.Signbit(tt.want[i]) {
					t.Errorf("value %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
	if _, err := Decode(TypeQ8_0, make([]byte, 33)); err == nil || !strings.Contains(err.Error(), "not a whole number of 34-byte blocks") {
		t.Errorf("Decode of 33 Q8_0 bytes: %v", err)
	}
}

// TestEncodeRounding checks the rounding of AppendEncoded against hand-computed bits.
func TestEncodeRounding(t *testing.T) {
	tests := []struct {
		name string
		typ  GGMLType
		in   []float32
		want []byte
	}{
		// 1+2^-11 lies halfway between 1 and the next F16; ties go to even (1).
		// 1+3*2^-11 lies halfway between 1+2^-10 and 1+2^-9; ties go to even (1+2^-9).
		{"f16 ties to even", TypeF16, []float32{1 + 1.0/2048, 1 + 3.0/2048, 70000},
			[]byte{0x00, 0x3C, 0x02, 0x3C, 0x00, 0x7C}}, // 70000 overflows to +Inf
		{"bf16 ties to even", TypeBF16, []float32{1 + 1.0/256, 1 + 3.0/256},
			[]byte{0x80, 0x3F, 0x82, 0x3F}},
		// amax 127 gives d = 1 (F16 0x3C00); 63.5 rounds half away from zero to 64 and
		// -0.5 to -1, as C's roundf does.
		{"q8_0", TypeQ8_0, append([]float32{127, -127, 63.5, -0.5, 0.49}, make([]float32, 27)...),
			append([]byte{0x00, 0x3C, 127, 0x81, 64, 0xFF, 0}, make([]byte, 27)...)},
		// An all-zero block has d = 0 and zero quants, not NaNs.
		{"q8_0 zero", TypeQ8_0, make([]float32, 32), make([]byte, 34)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AppendEncoded([]byte{0xEE}, tt.typ, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append([]byte{0xEE}, tt.want...)) {
				t.Fatalf("got %x, want ee%x", got, tt.want)
			}
		})
	}
	if _, err := AppendEncoded(nil, TypeQ8_0, make([]float32, 31)); err == nil || !strings.Contains(err.Error(), "not a multiple of its block size 32") {
		t.Errorf("31 values as Q8_0: %v", err)
	}
	if _, err := AppendEncoded(nil, TypeQ4_K, make([]float32, 256)); err == nil || !strings.Contains(err.Error(), "encoding Q4_K tensors is not supported") {
		t.Errorf("Q4_K encode: %v", err)
	}
}

func TestParseType(t *testing.T) {
	for in, want := range map[string]GGMLType{"f32": TypeF32, "F16": TypeF16, "q8_0": TypeQ8_0, "bf16": TypeBF16, "Q4_K": TypeQ4_K} {
		if got, err := ParseType(in); err != nil || got != want {
			t.Errorf("ParseType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseType("q9"); err == nil {
		t.Error(`ParseType("q9") succeeded`)
	}
	if TypeQ8_0.String() != "Q8_0" || GGMLType(4).String() != "GGMLType(4)" {
		t.Errorf("String() = %q, %q", TypeQ8_0.String(), GGMLType(4).String())
	}
}

// smallFile is a valid file whose last tensor ends exactly at the end of the file, so
// that every strict prefix of it is a truncated file.
func smallFile(t *testing.T) []byte {
	w := NewWriter()
	w.AddKV("general.architecture", "qwen3")
	w.AddKV("tokens", []string{"a", "bc"})
	w.AddKV("types", []int32{1, 3})
	w.AddTensor("x", TypeF16, []uint64{4}, bytesFill(mustEncode(t, TypeF16, []float32{1, 2, 3, 4})))
	w.AddTensor("y", TypeF32, []uint64{8}, bytesFill(mustEncode(t, TypeF32, make([]float32, 8))))
	p := filepath.Join(t.TempDir(), "s.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTruncatedFiles(t *testing.T) {
	full := smallFile(t)
	dir := t.TempDir()
	for n := 0; n < len(full); n++ {
		p := filepath.Join(dir, "trunc.gguf")
		if err := os.WriteFile(p, full[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := Open(p)
		if err == nil {
			f.Close()
			t.Fatalf("Open of the first %d of %d bytes succeeded", n, len(full))
		}
		if !errors.Is(err, ErrFormat) {
			t.Fatalf("prefix %d: error %v does not wrap ErrFormat", n, err)
		}
	}
	f, err := Open(writeTemp(t, full))
	if err != nil {
		t.Fatalf("the full file does not open: %v", err)
	}
	f.Close()
}

func TestCorruptFiles(t *testing.T) {
	// tensorFile builds a one-tensor file with the given index fields, data included.
	tensorFile := func(kv func(*rawFile), name string, nDims uint32, dims []uint64, typ uint32, offset uint64) []byte {
		var r rawFile
		nKV := uint64(0)
		if kv != nil {
			nKV = 1
		}
		r.header(3, 1, nKV)
		if kv != nil {
			kv(&r)
		}
		r.str(name).u32(nDims)
		for _, d := range dims {
			r.u64(d)
		}
		r.u32(typ).u64(offset)
		r.pad(32)
		r.Write(make([]byte, 256))
		return r.Bytes()
	}
	build := func(f func(*rawFile)) []byte {
		var r rawFile
		f(&r)
		return r.Bytes()
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"bad magic", build(func(r *rawFile) { r.WriteString("GGML"); r.u32(3).u64(0).u64(0) }), `magic is "GGML"`},
		{"version 1", build(func(r *rawFile) { r.header(1, 0, 0) }), "GGUF version 1 is not supported"},
		{"big endian", build(func(r *rawFile) { r.header(0x03000000, 0, 0) }), "big-endian"},
		{"huge kv count", build(func(r *rawFile) { r.header(3, 0, 1<<60) }), "metadata count 1152921504606846976 cannot fit"},
		{"huge tensor count", build(func(r *rawFile) { r.header(3, 1<<40, 0) }), "tensor count 1099511627776 cannot fit"},
		{"huge key length", build(func(r *rawFile) { r.header(3, 0, 1).u64(1 << 50).u32(4).u32(1) }), "key of metadata pair 0 needs 1125899906842624 bytes"},
		{"huge string value", build(func(r *rawFile) { r.header(3, 0, 1).str("k").u32(8).u64(1 << 62) }), `value of key "k" needs 4611686018427387904 bytes`},
		{"huge array", build(func(r *rawFile) { r.header(3, 0, 1).str("toks").u32(9).u32(8).u64(1 << 61) }), `key "toks": an array of 2305843009213693952 string values`},
		{"huge u64 array", build(func(r *rawFile) { r.header(3, 0, 1).str("n").u32(9).u32(10).u64(1 << 40) }), `key "n": an array of 1099511627776 uint64 values`},
		{"invalid value type", build(func(r *rawFile) { r.header(3, 0, 1).str("k").u32(13).u32(0) }), `key "k" has invalid value type 13`},
		{"nested array", build(func(r *rawFile) { r.header(3, 0, 1).str("k").u32(9).u32(9).u64(1) }), `key "k" is an array of arrays`},
		{"duplicate key", build(func(r *rawFile) { r.header(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2) }), `duplicate metadata key "k"`},
		{"alignment not power of two", tensorFile(func(r *rawFile) { r.str(AlignmentKey).u32(4).u32(48) }, "t", 1, []uint64{4}, 0, 0), `key "general.alignment" is 48, want a power of two`},
		{"alignment wrong type", tensorFile(func(r *rawFile) { r.str(AlignmentKey).u32(10).u64(32) }, "t", 1, []uint64{4}, 0, 0), `key "general.alignment" is uint64, want uint32`},
		{"too many dims", tensorFile(nil, "t", 5, []uint64{1, 1, 1, 1, 1}, 0, 0), `tensor "t" has 5 dimensions`},
		{"negative dim", tensorFile(nil, "t", 1, []uint64{1 << 63}, 0, 0), `tensor "t" dimension 0 is -9223372036854775808`},
		{"element overflow", tensorFile(nil, "t", 2, []uint64{1 << 32, 1 << 32}, 0, 0), `tensor "t" with dims [4294967296 4294967296] has more than 2^63 elements`},
		{"unknown tensor type", tensorFile(nil, "t", 1, []uint64{4}, 99, 0), `tensor "t" has unknown ggml type 99`},
		{"row not a multiple of block", tensorFile(nil, "t", 2, []uint64{10, 2}, uint32(TypeQ8_0), 0), `tensor "t" of type Q8_0 has rows of 10 values, not a multiple of the block size 32`},
		{"misaligned offset", tensorFile(nil, "t", 1, []uint64{4}, 0, 8), `tensor "t" has data offset 8, not a multiple of the alignment 32`},
		{"data past end", tensorFile(nil, "t", 1, []uint64{1000}, 0, 0), `tensor "t" needs data bytes [0, 4000) but the data section holds 256 bytes`},
		{"offset past end", tensorFile(nil, "t", 1, []uint64{4}, 0, 1<<40), `tensor "t" needs data bytes [1099511627776, 1099511627792)`},
		{"long tensor name", tensorFile(nil, strings.Repeat("n", 64), 1, []uint64{4}, 0, 0), "is 64 bytes long; ggml allows at most 63"},
		{"duplicate tensor", build(func(r *rawFile) {
			r.header(3, 2, 0)
			r.str("t").u32(1).u64(8).u32(0).u64(0)
			r.str("t").u32(1).u64(8).u32(0).u64(32)
			r.pad(32)
			r.Write(make([]byte, 64))
		}), `duplicate tensor name "t"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeTemp(t, tt.data)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			f, err := Open(p)
			runtime.ReadMemStats(&after)
			if err == nil {
				f.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v\nwant it to contain %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %v does not name the file", err)
			}
			// A corrupt count or length must be refused before it is allocated.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
				t.Errorf("Open allocated %d bytes for a %d-byte corrupt file", alloc, len(tt.data))
			}
		})
	}
}

// TestOpenVersion2 reads a version 2 file, whose little-endian layout is version 3's.
func TestOpenVersion2(t *testing.T) {
	var r rawFile
	r.header(2, 0, 1).str("k").u32(8).str("v")
	f, err := Open(writeTemp(t, r.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v, _ := f.String("k"); f.Version() != 2 || v != "v" {
		t.Fatalf("version %d, k = %q; want 2 and \"v\"", f.Version(), v)
	}
}

func TestOpenMissingFile(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "none.gguf"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("error %v does not wrap os.ErrNotExist", err)
	}
}

func TestWriterErrors(t *testing.T) {
	ok := bytesFill(make([]byte, 16))
	tests := []struct {
		name  string
		build func(w *Writer)
		want  string
	}{
		{"duplicate key", func(w *Writer) { w.AddKV("k", uint32(1)); w.AddKV("k", uint32(2)) }, `key "k" added twice`},
		{"go int", func(w *Writer) { w.AddKV("n", 5) }, `key "n" has Go type int`},
		{"unsupported slice", func(w *Writer) { w.AddKV("m", []int{1}) }, `key "m" has Go type []int`},
		{"bad alignment", func(w *Writer) { w.AddKV(AlignmentKey, uint32(24)) }, `key "general.alignment" is uint32 24, want a uint32 power of two`},
		{"alignment wrong type", func(w *Writer) { w.AddKV(AlignmentKey, uint64(32)) }, `key "general.alignment" is uint64 32`},
		{"duplicate tensor", func(w *Writer) {
			w.AddTensor("t", TypeF32, []uint64{4}, ok)
			w.AddTensor("t", TypeF32, []uint64{4}, ok)
		}, `tensor "t" added twice`},
		{"long name", func(w *Writer) { w.AddTensor(strings.Repeat("x", 64), TypeF32, []uint64{4}, ok) }, "must be 1 to 63 bytes long"},
		{"unknown type", func(w *Writer) { w.AddTensor("t", GGMLType(5), []uint64{4}, ok) }, `tensor "t" has unknown type GGMLType(5)`},
		{"too many dims", func(w *Writer) { w.AddTensor("t", TypeF32, []uint64{1, 1, 1, 1, 1}, ok) }, `tensor "t" has 5 dimensions`},
		{"block size", func(w *Writer) { w.AddTensor("t", TypeQ8_0, []uint64{16}, ok) }, `tensor "t" of type Q8_0 has rows of 16 values`},
		{"nil fill", func(w *Writer) { w.AddTensor("t", TypeF32, []uint64{4}, nil) }, `tensor "t" has no fill function`},
		{"short fill", func(w *Writer) { w.AddTensor("short", TypeF32, []uint64{8}, ok) }, `tensor "short" (F32 [8]): fill wrote 16 bytes, want 32`},
		{"fill error", func(w *Writer) {
			w.AddTensor("bad", TypeF32, []uint64{4}, func(io.Writer) error { return io.ErrClosedPipe })
		}, `tensor "bad": io: read/write on closed pipe`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "out.gguf")
			w := NewWriter()
			tt.build(w)
			err := w.WriteFile(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("WriteFile error = %v, want one containing %q", err, tt.want)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 0 {
				t.Errorf("a failed write left %d files behind (first %q)", len(entries), entries[0].Name())
			}
		})
	}
}

// TestWriterReplacesAtomically checks that a failed write leaves an existing file as it
// was, and that writing twice gives identical bytes.
func TestWriterReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.gguf")
	good := NewWriter()
	good.AddKV("general.name", "first")
	good.AddTensor("t", TypeF16, []uint64{4}, bytesFill(mustEncode(t, TypeF16, []float32{1, 2, 3, 4})))
	if err := good.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(p)
	if err := good.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(p)
	if !bytes.Equal(first, second) {
		t.Fatal("writing the same content twice gave different bytes")
	}

	bad := NewWriter()
	bad.AddKV("general.name", "second")
	bad.AddTensor("t", TypeF32, []uint64{4}, func(w io.Writer) error {
		w.Write(make([]byte, 8))
		return errors.New("generator failed")
	})
	if err := bad.WriteFile(p); err == nil || !strings.Contains(err.Error(), "generator failed") {
		t.Fatalf("WriteFile = %v, want the fill error", err)
	}
	after, _ := os.ReadFile(p)
	if !bytes.Equal(after, first) {
		t.Fatal("a failed write changed the existing file")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries after a failed write, want 1", len(entries))
	}
}

// Digest is the file's sha256, read back from the cache while the file is
// unchanged and computed again once it changes.
func TestDigestCached(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(path, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // sha256("abc")
	for range 2 {
		d, err := Digest(path, cache)
		if err != nil || d != abc {
			t.Fatalf("Digest = %q, %v; want %s", d, err, abc)
		}
	}
	entries, _ := os.ReadDir(cache)
	if len(entries) != 1 {
		t.Fatalf("cache holds %d entries, want 1", len(entries))
	}
	// A cached entry is trusted only for the same size and time: a changed file
	// is hashed again.
	if err := os.WriteFile(path, []byte("abcd"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, _ := Digest(path, cache); d != "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589" {
		t.Fatalf("Digest after a change = %s", d)
	}
	if d, _ := Digest(path, ""); d != "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589" {
		t.Fatalf("Digest without a cache = %s", d)
	}
}

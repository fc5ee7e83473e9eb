package gguf

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// bf16RNE is the BF16 nearest to x, ties to even, computed with math/big (an 8-bit
// significand) rather than with the bit trick under test. x must be finite and
// within BF16's range, which every F16 value is.
func bf16RNE(x float32) uint16 {
	r, _ := new(big.Float).SetPrec(8).SetMode(big.ToNearestEven).SetFloat64(float64(x)).Float32()
	return uint16(math.Float32bits(r) >> 16)
}

// every16 is every 16-bit pattern once, as little-endian bytes: all F16 values,
// subnormals, infinities and NaNs included.
func every16() []byte {
	b := make([]byte, 0, 1<<17)
	for u := range 1 << 16 {
		b = binary.LittleEndian.AppendUint16(b, uint16(u))
	}
	return b
}

// convertSource writes a file with every F16 value in a 2-D matrix (converted), an
// F16 vector and an F32 norm (kept: 1-D), a Q8_0 matrix and an F32 matrix (kept:
// not F16), metadata of several types, and a 64-byte alignment.
func convertSource(t *testing.T) (*File, map[string][]byte) {
	t.Helper()
	data := map[string][]byte{
		"blk.0.attn_q.weight":  every16(),
		"blk.0.attn_q.bias":    mustEncode(t, TypeF16, []float32{1.5, -2.25, 3e-5}),
		"blk.0.attn_norm":      mustEncode(t, TypeF32, []float32{1, 0.5, 0.25, 0.125}),
		"blk.0.ffn_up.weight":  mustEncode(t, TypeQ8_0, make([]float32, 64)),
		"blk.0.ffn_down.float": mustEncode(t, TypeF32, []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}),
	}
	w := NewWriter()
	w.AddKV("general.architecture", "qwen3")
	w.AddKV(AlignmentKey, uint32(64))
	w.AddKV("general.file_type", uint32(1))
	w.AddKV("qwen3.rope.freq_base", float32(1e6))
	w.AddKV("tokenizer.ggml.tokens", []string{"a", "b", "<|endoftext|>"})
	w.AddKV("tokenizer.ggml.token_type", []int32{1, 1, 3})
	w.AddKV("flag", true)
	w.AddTensor("blk.0.attn_q.weight", TypeF16, []uint64{256, 256}, bytesFill(data["blk.0.attn_q.weight"]))
	w.AddTensor("blk.0.attn_q.bias", TypeF16, []uint64{3}, bytesFill(data["blk.0.attn_q.bias"]))
	w.AddTensor("blk.0.attn_norm", TypeF32, []uint64{4}, bytesFill(data["blk.0.attn_norm"]))
	w.AddTensor("blk.0.ffn_up.weight", TypeQ8_0, []uint64{32, 2}, bytesFill(data["blk.0.ffn_up.weight"]))
	w.AddTensor("blk.0.ffn_down.float", TypeF32, []uint64{3, 2}, bytesFill(data["blk.0.ffn_down.float"]))
	f, _ := writeAndOpen(t, w)
	return f, data
}

func f16Matrices(t TensorInfo) bool { return t.Type == TypeF16 && len(t.Dims) >= 2 }

func readTensor(t *testing.T, f *File, name string) []byte {
	t.Helper()
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("tensor %q missing", name)
	}
	b, err := io.ReadAll(f.TensorReader(ti))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConvertF16ToBF16 converts the F16 matrix of a file holding every F16 value:
// each BF16 value is the round-to-nearest-even of the F16 value (through float32,
// as ggml converts), computed independently; NaNs stay NaN and infinities infinite.
// The metadata bytes, the other tensors' bytes, names, dims and order are the
// source's, and llama.cpp's alignment holds in the new layout.
func TestConvertF16ToBF16(t *testing.T) {
	src, data := convertSource(t)
	dst := filepath.Join(t.TempDir(), "bf16.gguf")
	st, err := src.Convert(dst, TypeBF16, f16Matrices)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tensors != 1 || st.SourceBytes != 1<<17 || st.TargetBytes != 1<<17 {
		t.Errorf("stats %+v, want 1 tensor of 131072 bytes each way", st)
	}
	out, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if fi, _ := os.Stat(dst); uint64(fi.Size()) != st.FileBytes {
		t.Errorf("FileBytes %d, file is %d bytes", st.FileBytes, fi.Size())
	}

	// Metadata: byte for byte the source's header up to the tensor index.
	a, _ := os.ReadFile(src.path)
	b, _ := os.ReadFile(dst)
	if src.kvEnd != out.kvEnd || !bytes.Equal(a[:src.kvEnd], b[:out.kvEnd]) {
		t.Fatalf("metadata bytes differ: source %d bytes, converted %d", src.kvEnd, out.kvEnd)
	}
	if !reflect.DeepEqual(src.Keys(), out.Keys()) || out.Alignment() != 64 {
		t.Fatalf("keys %v (alignment %d), want %v", out.Keys(), out.Alignment(), src.Keys())
	}

	// The tensor index: same names, dims and order; only the matrix changed type.
	want := src.Tensors()
	want[0].Type = TypeBF16
	got := out.Tensors()
	for i := range got {
		if got[i].Offset%64 != 0 {
			t.Errorf("tensor %q at offset %d, not 64-aligned", got[i].Name, got[i].Offset)
		}
		got[i].Offset, want[i].Offset = 0, 0
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tensors\n got %+v\nwant %+v", got, want)
	}
	for name, raw := range data {
		if name == "blk.0.attn_q.weight" {
			continue
		}
		if !bytes.Equal(readTensor(t, out, name), raw) {
			t.Errorf("tensor %q: bytes changed", name)
		}
	}

	conv := readTensor(t, out, "blk.0.attn_q.weight")
	nans := 0
	for u := range 1 << 16 {
		h := float16.Frombits(uint16(u))
		g := binary.LittleEndian.Uint16(conv[2*u:])
		gf := math.Float32frombits(uint32(g) << 16)
		switch {
		case h.IsNaN():
			nans++
			if !math.IsNaN(float64(gf)) {
				t.Fatalf("F16 %#04x (NaN) became BF16 %#04x, not a NaN", u, g)
			}
		case h.IsInf(0):
			if !math.IsInf(float64(gf), int(math.Copysign(1, float64(h.Float32())))) {
				t.Fatalf("F16 %#04x (%v) became BF16 %#04x", u, h.Float32(), g)
			}
		default:
			if w := bf16RNE(h.Float32()); g != w {
				t.Fatalf("F16 %#04x (%v) became BF16 %#04x, want %#04x", u, h.Float32(), g, w)
			}
		}
	}
	if nans != 2046 {
		t.Errorf("%d NaN patterns checked, want 2046", nans)
	}
}

// TestConvertF32Matrices converts F32 matrices too (what --weights bf16 does): the
// F32 norm, a vector, stays F32.
func TestConvertF32Matrices(t *testing.T) {
	src, data := convertSource(t)
	dst := filepath.Join(t.TempDir(), "bf16.gguf")
	st, err := src.Convert(dst, TypeBF16, func(t TensorInfo) bool {
		return (t.Type == TypeF16 || t.Type == TypeF32) && len(t.Dims) >= 2
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Tensors != 2 {
		t.Errorf("%d tensors converted, want 2", st.Tensors)
	}
	out, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ti, _ := out.Tensor("blk.0.ffn_down.float")
	norm, _ := out.Tensor("blk.0.attn_norm")
	if ti.Type != TypeBF16 || norm.Type != TypeF32 {
		t.Fatalf("matrix %s, norm %s; want BF16 and F32", ti.Type, norm.Type)
	}
	got := readTensor(t, out, "blk.0.ffn_down.float")
	for i, v := range []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6} {
		if g, w := binary.LittleEndian.Uint16(got[2*i:]), bf16RNE(v); g != w {
			t.Errorf("value %d (%v): BF16 %#04x, want %#04x", i, v, g, w)
		}
	}
	if !bytes.Equal(readTensor(t, out, "blk.0.attn_norm"), data["blk.0.attn_norm"]) {
		t.Error("the F32 norm changed")
	}
}

// TestConvertStreams converts a 32 MiB F16 matrix (16 chunks) and checks that the
// conversion allocated a fraction of it: a converter that held a tensor, let alone
// the file, would allocate 32 MiB for its bytes and 64 MiB for its float32 values.
// An 8B model's F16 file is 16 GB.
func TestConvertStreams(t *testing.T) {
	const rows, cols = 4096, 4096
	w := NewWriter()
	w.AddKV("general.architecture", "qwen3")
	w.AddTensor("token_embd.weight", TypeF16, []uint64{cols, rows}, func(out io.Writer) error {
		row := make([]byte, 2*cols)
		for r := range rows {
			for c := range cols {
				binary.LittleEndian.PutUint16(row[2*c:], float16.Fromfloat32(float32(r-c)/float32(cols)).Bits())
			}
			if _, err := out.Write(row); err != nil {
				return err
			}
		}
		return nil
	})
	src, _ := writeAndOpen(t, w)
	dst := filepath.Join(t.TempDir(), "bf16.gguf")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := src.Convert(dst, TypeBF16, f16Matrices); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("converting a 32 MiB tensor allocated %d MiB; it should stream in chunks", alloc>>20)
	}
	out, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	got := readTensor(t, out, "token_embd.weight")
	for _, i := range []int{0, 1, cols - 1, cols, convertChunk - 1, convertChunk, convertChunk + 1, rows*cols - 1} {
		r, c := i/cols, i%cols
		h := float16.Fromfloat32(float32(r-c) / float32(cols)).Float32()
		if g, w := binary.LittleEndian.Uint16(got[2*i:]), bf16RNE(h); g != w {
			t.Errorf("value %d: BF16 %#04x, want %#04x", i, g, w)
		}
	}
}

// TestConvertRefusals: an unsupported target or source type is refused before
// anything is written, and a failed write leaves no file behind.
func TestConvertRefusals(t *testing.T) {
	src, _ := convertSource(t)
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.gguf")
	if _, err := src.Convert(dst, TypeQ4_K, f16Matrices); err == nil || !strings.Contains(err.Error(), "converting to Q4_K is not supported") {
		t.Errorf("to Q4_K: %v", err)
	}
	// Q8_0 rows must be whole blocks: a 3-wide F32 matrix cannot become Q8_0.
	if _, err := src.Convert(dst, TypeQ8_0, func(t TensorInfo) bool { return t.Name == "blk.0.ffn_down.float" }); err == nil ||
		!strings.Contains(err.Error(), `tensor "blk.0.ffn_down.float" has rows of 3 values, not a multiple of Q8_0's block size 32`) {
		t.Errorf("3-wide rows to Q8_0: %v", err)
	}
	if _, err := src.Convert(filepath.Join(dir, "missing", "out.gguf"), TypeBF16, f16Matrices); err == nil {
		t.Error("a folder that does not exist: no error")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

// reversing is a Layout writer for the tests: it holds a tensor's bytes and writes
// them reversed when closed, failing a tensor of the wrong size.
type reversing struct {
	w    io.Writer
	want uint64
	buf  []byte
}

func (r *reversing) Write(p []byte) (int, error) { r.buf = append(r.buf, p...); return len(p), nil }

func (r *reversing) Close() error {
	if uint64(len(r.buf)) != r.want {
		return io.ErrShortWrite
	}
	for i, j := 0, len(r.buf)-1; i < j; i, j = i+1, j-1 {
		r.buf[i], r.buf[j] = r.buf[j], r.buf[i]
	}
	_, err := r.w.Write(r.buf)
	return err
}

// TestConvertWith: metadata added after the source's and replaced in place, every
// other key the source's value; a new alignment honoured by every tensor's offset
// (and written as general.alignment); a Layout that rewrites the converted matrix
// (here reversed) while the other tensors keep their bytes; and a Layout whose
// writer fails on Close fails the copy.
func TestConvertWith(t *testing.T) {
	src, data := convertSource(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "out.gguf")
	_, err := src.ConvertWith(path, ConvertOptions{
		To: TypeBF16, Convert: f16Matrices, Alignment: 128,
		KVs: []KV{{"embed_stack.test", []string{"blk.0.attn_q.weight"}}, {"flag", false}},
		Layout: func(ti TensorInfo, w io.Writer) io.Writer {
			if ti.Name != "blk.0.attn_q.weight" {
				return nil
			}
			return &reversing{w: w, want: ti.Bytes()}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	wantKeys := append(src.Keys(), "embed_stack.test")
	if got := f.Keys(); !reflect.DeepEqual(got, wantKeys) {
		t.Errorf("keys %v, want %v", got, wantKeys)
	}
	for _, k := range src.Keys() {
		got, _ := f.Get(k)
		want, _ := src.Get(k)
		switch k {
		case "flag":
			want = false
		case AlignmentKey:
			want = uint32(128)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("key %s: %v, want %v", k, got, want)
		}
	}
	if v, _ := f.Get("embed_stack.test"); !reflect.DeepEqual(v, []string{"blk.0.attn_q.weight"}) {
		t.Errorf("added key: %v", v)
	}
	if f.Alignment() != 128 {
		t.Errorf("alignment %d, want 128", f.Alignment())
	}
	for _, ti := range f.Tensors() {
		if (f.DataOffset()+ti.Offset)%128 != 0 {
			t.Errorf("tensor %s at %d, not 128-aligned", ti.Name, f.DataOffset()+ti.Offset)
		}
	}
	if _, err := src.Convert(filepath.Join(dir, "plain.gguf"), TypeBF16, f16Matrices); err != nil {
		t.Fatal(err)
	}
	pf, err := Open(filepath.Join(dir, "plain.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	q, plain := readTensor(t, f, "blk.0.attn_q.weight"), readTensor(t, pf, "blk.0.attn_q.weight")
	for i := range plain {
		if got, want := q[len(q)-1-i], plain[i]; got != want {
			t.Fatalf("byte %d of the relaid matrix: %#x, want %#x (Convert's BF16 bytes reversed)", i, got, want)
		}
	}
	for _, name := range []string{"blk.0.attn_q.bias", "blk.0.attn_norm", "blk.0.ffn_up.weight", "blk.0.ffn_down.float"} {
		if got := readTensor(t, f, name); !bytes.Equal(got, data[name]) {
			t.Errorf("tensor %s changed", name)
		}
	}

	_, err = src.ConvertWith(filepath.Join(dir, "bad.gguf"), ConvertOptions{To: TypeBF16, Convert: f16Matrices,
		Layout: func(ti TensorInfo, w io.Writer) io.Writer { return &reversing{w: w, want: ti.Bytes() + 1} }})
	if err == nil || !strings.Contains(err.Error(), io.ErrShortWrite.Error()) {
		t.Errorf("a Layout failing on Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.gguf")); !os.IsNotExist(err) {
		t.Errorf("the failed copy was left behind: %v", err)
	}
}

package weights

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/gguf"
)

// TestPanelWriter: each value of a 64-row matrix of 40 values lands where accel.c's
// kernels read it, [p][k/2][j][k%2], computed here value by value (not by pairs),
// whatever the sizes of the writes; a matrix ending inside a panel fails on Close.
func TestPanelWriter(t *testing.T) {
	const k, n = 40, 64
	rows := make([]byte, 0, k*n*2)
	for r := range n {
		for c := range k {
			rows = binary.LittleEndian.AppendUint16(rows, uint16(r*1000+c))
		}
	}
	for _, chunk := range []int{1, 7, 80, 5000, len(rows)} {
		var out bytes.Buffer
		pw := newPanelWriter(&out, k)
		for b := rows; len(b) > 0; {
			m := min(chunk, len(b))
			if _, err := pw.Write(b[:m]); err != nil {
				t.Fatal(err)
			}
			b = b[m:]
		}
		if err := pw.Close(); err != nil {
			t.Fatal(err)
		}
		got := out.Bytes()
		if len(got) != len(rows) {
			t.Fatalf("chunks of %d: %d bytes, want %d", chunk, len(got), len(rows))
		}
		for r := range n {
			for c := range k {
				p, j := r/panelWidth, r%panelWidth
				at := p*k*panelWidth + (c/2)*panelWidth*2 + j*2 + c%2
				if v := binary.LittleEndian.Uint16(got[at*2:]); v != uint16(r*1000+c) {
					t.Fatalf("chunks of %d: row %d value %d: %d at value %d, want %d", chunk, r, c, v, at, r*1000+c)
				}
			}
		}
	}
	pw := newPanelWriter(io.Discard, k)
	if _, err := pw.Write(rows[:k*2*33]); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err == nil || !strings.Contains(err.Error(), "partial panel") {
		t.Errorf("33 rows: Close gave %v, want a partial panel refused", err)
	}
}

// TestLoadPanels: for a device whose embed-stack kernels multiply BF16, Auto and
// BF16 write copies whose layers' matrices of whole panels are panels (named in
// the metadata, with the width, the data 64-byte aligned), under a name of their
// own; the token embedding, a layer's matrix of a partial panel and vectors stay
// as they are; on the same CPU with those kernels off, or on a GPU, no panels.
func TestLoadPanels(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := func(rows, cols int) []float32 {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(i%97) / 16
		}
		return v
	}
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	add := func(name string, dims []uint64, vals []float32) {
		b, err := gguf.AppendEncoded(nil, gguf.TypeF16, vals)
		if err != nil {
			t.Fatal(err)
		}
		w.AddTensor(name, gguf.TypeF16, dims, func(w io.Writer) error { _, err := w.Write(b); return err })
	}
	add("token_embd.weight", []uint64{64, 64}, m(64, 64))
	add("blk.0.attn_q.weight", []uint64{64, 64}, m(64, 64))
	add("blk.0.ffn_up.weight", []uint64{64, 48}, m(48, 64)) // 48 rows: a partial panel
	add("blk.0.attn_norm.weight", []uint64{64}, m(1, 64))
	src := filepath.Join(dir, "model.gguf")
	if err := w.WriteFile(src); err != nil {
		t.Fatal(err)
	}
	zen5 := kernelsOn(t, "zen5-avx512.cpuinfo", "", portable)
	esk := *zen5
	esk.CPUAccel, esk.CPUAccelBF16 = "embed-stack kernels (AVX-512, BF16)", true
	gpu := esk
	gpu.GPU, gpu.Name = true, "CUDA0"
	var log logBuf
	copies := map[bool]string{}
	for _, tt := range []struct {
		mode   string
		dev    *backends.Device
		panels bool
	}{{Auto, &esk, true}, {BF16, &esk, true}, {Auto, zen5, false}, {BF16, zen5, false}, {BF16, &gpu, false}} {
		r := Load(ctx, Request{Source: src, Mode: tt.mode, Device: deviceOf(tt.dev), CacheDir: t.TempDir()}, log.logger())
		if !r.Converted() || strings.HasSuffix(r.Path, "-esk32.gguf") != tt.panels {
			t.Fatalf("%s on %s (BF16 kernels %t, GPU %t): %+v, want panels %t", tt.mode, tt.dev.CPUVariant, tt.dev.CPUAccelBF16, tt.dev.GPU, r, tt.panels)
		}
		f, err := gguf.Open(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		names, _ := f.Strings(panelsKey)
		width, _ := f.Uint32(panelWidthKey)
		if tt.panels && (!slices.Equal(names, []string{"blk.0.attn_q.weight"}) || width != panelWidth || f.Alignment() != panelAlignment) ||
			!tt.panels && names != nil {
			t.Errorf("%s, panels %t: listed %v, width %d, alignment %d", tt.mode, tt.panels, names, width, f.Alignment())
		}
		copies[tt.panels] = r.Path
		f.Close()
	}
	// Both layouts of one conversion stay side by side: a server with other
	// settings may load the other.
	cache := t.TempDir()
	first := Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(&esk), CacheDir: cache}, log.logger())
	second := Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: cache}, log.logger())
	for _, path := range []string{first.Path, second.Path} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%s: %v", filepath.Base(path), err)
		}
	}

	// The panel copy's matrices are the plain copy's bytes, attn_q's as panels.
	pf, err := gguf.Open(copies[true])
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	rf, err := gguf.Open(copies[false])
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	for _, ti := range rf.Tensors() {
		want := readAll(t, rf, ti)
		if ti.Name == "blk.0.attn_q.weight" {
			var b bytes.Buffer
			pw := newPanelWriter(&b, int(ti.Dims[0]))
			if _, err := pw.Write(want); err != nil || pw.Close() != nil {
				t.Fatal(err)
			}
			want = b.Bytes()
		}
		pt, _ := pf.Tensor(ti.Name)
		if got := readAll(t, pf, pt); pt.Type != ti.Type || !bytes.Equal(got, want) {
			t.Errorf("tensor %s of the panel copy (%s): not the plain copy's bytes%s", ti.Name, pt.Type, map[bool]string{true: " as panels", false: ""}[ti.Name == "blk.0.attn_q.weight"])
		}
	}
}

func readAll(t *testing.T, f *gguf.File, ti gguf.TensorInfo) []byte {
	t.Helper()
	b, err := io.ReadAll(f.TensorReader(ti))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

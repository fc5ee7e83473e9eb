package weights

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/gguf"
)

// portable are the features of a portable build's compiled-in kernels (x86-64-v2),
// which leave the choice to the variant libraries.
var portable = []string{"SSE3", "SSSE3", "LLAMAFILE"}

// kernelsOn is the device of a CPU worker on the recorded host file with every
// variant library present, as `embed-stack devices --json` reports it.
func kernelsOn(t *testing.T, file, choice string, builtin []string) *backends.Device {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "backends", "cpuvariant", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	host := cpuvariant.ParseCPUInfo("amd64", string(b))
	var all []string
	for _, v := range cpuvariant.ForArch("amd64") {
		all = append(all, v.Name)
	}
	c, err := cpuvariant.Choose(cpuvariant.Request{Host: host, Choice: choice, Present: all, Builtin: builtin, Dir: "lib/embed-stack"})
	if err != nil {
		t.Fatal(err)
	}
	return &backends.Device{Name: "CPU", Backend: "CPU", CPUVariant: c.Name(), CPUFeatures: c.Features, CPUVendor: c.Vendor}
}

// TestPaysOffOnRecordedHosts is Auto's rule against the recorded /proc/cpuinfo of
// each CPU class: BF16 where the kernels the workers get have AVX-512 BF16 (Zen 5
// through its variant, or a native build on Zen 5); on Intel's CPUs (Sapphire and
// Emerald Rapids: their BF16 dot products do half the arithmetic of their FMAs)
// only where embed-stack's kernels multiply BF16 (in FMAs), not through ggml's
// variant; never on AVX2 or AVX-512 without BF16, never with a variant forced that
// lacks it, and never on a GPU.
func TestPaysOffOnRecordedHosts(t *testing.T) {
	native := []string{"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "LLAMAFILE"}
	tests := []struct {
		file, choice string
		builtin      []string
		want         bool
	}{
		{"zen5-avx512.cpuinfo", "", portable, true},                // zen4
		{"sapphirerapids-amx.cpuinfo", "", portable, false},        // sapphirerapids, Intel
		{"emeraldrapids-noamx.cpuinfo", "", portable, false},       // zen4, Intel
		{"emeraldrapids-noamx.cpuinfo", "", native, false},         // builtin, Intel
		{"zen5-avx512.cpuinfo", "", native, true},                  // builtin, -march=native
		{"zen5-avx512.cpuinfo", "haswell", portable, false},        // forced AVX2
		{"zen5-avx512.cpuinfo", "icelake", portable, false},        // forced, AVX-512 without BF16
		{"sapphirerapids-amx.cpuinfo", "builtin", portable, false}, // the portable baseline
		{"skylakex-avx512.cpuinfo", "", portable, false},
		{"zen3-avx2.cpuinfo", "", portable, false},
		{"sandybridge-avx.cpuinfo", "", portable, false},
	}
	for _, tt := range tests {
		dev := kernelsOn(t, tt.file, tt.choice, tt.builtin)
		why, ok := PaysOff(dev)
		if ok != tt.want {
			t.Errorf("%s, --cpu-variant %q (kernels %s %v): pays off %t (%s), want %t", tt.file, tt.choice, dev.CPUVariant, dev.CPUFeatures, ok, why, tt.want)
		}
	}
	gpu := kernelsOn(t, "zen5-avx512.cpuinfo", "", portable)
	gpu.GPU, gpu.Name = true, "CUDA0"
	if why, ok := PaysOff(gpu); ok || !strings.Contains(why, "GPU (CUDA0)") {
		t.Errorf("on a GPU: %t (%s)", ok, why)
	}
	// embed-stack's own kernels take every BF16 product where they multiply BF16
	// (--cpu-accel auto on a CPU with AVX512_BF16), so a variant without it (forced
	// haswell) no longer decides; on a GPU nothing of the CPU's does.
	esk := kernelsOn(t, "zen5-avx512.cpuinfo", "haswell", portable)
	esk.CPUAccel, esk.CPUAccelBF16 = "embed-stack kernels (AVX-512, BF16)", true
	if why, ok := PaysOff(esk); !ok || why != "embed-stack kernels (AVX-512, BF16) multiply BF16 with AVX512_BF16" {
		t.Errorf("haswell with embed-stack's BF16 products: %t (%s), want true", ok, why)
	}
	esk.CPUAccelBF16 = false
	if why, ok := PaysOff(esk); ok || !strings.Contains(why, "lack AVX512_BF16 and embed-stack's kernels do not multiply BF16 here") {
		t.Errorf("haswell, embed-stack's kernels without BF16 products: %t (%s), want false", ok, why)
	}
	// On Intel's CPUs only embed-stack's kernels (FMAs over widened BF16) pay off,
	// not ggml's dot products.
	intel := kernelsOn(t, "emeraldrapids-noamx.cpuinfo", "", portable)
	intel.CPUAccel, intel.CPUAccelBF16 = "embed-stack kernels (AVX-512, BF16)", true
	if why, ok := PaysOff(intel); !ok || why != "embed-stack kernels (AVX-512, BF16) multiply BF16 in float32 FMAs, faster than ggml's F16 products on Intel's cores" {
		t.Errorf("Emerald Rapids with embed-stack's BF16 products: %t (%s), want true", ok, why)
	}
	// Where the kernels multiply in AMX tiles (Sapphire Rapids and later), they say so.
	intel.CPUAccel = "embed-stack kernels (AVX-512, BF16, AMX)"
	if why, ok := PaysOff(intel); !ok || why != "embed-stack kernels (AVX-512, BF16, AMX) multiply BF16 in AMX tiles" {
		t.Errorf("embed-stack's BF16 products in AMX tiles: %t (%s), want true", ok, why)
	}
	intel.CPUAccel, intel.CPUAccelBF16 = "", false
	if why, ok := PaysOff(intel); ok || !strings.Contains(why, "which Intel's cores run at half the arithmetic of their float32 FMAs") {
		t.Errorf("Emerald Rapids, --cpu-accel off: %t (%s), want false", ok, why)
	}
	// Without AVX512_BF16 embed-stack's kernels still multiply BF16 (AVX-512's FMAs
	// on Intel's Skylake-SP to Ice Lake, AVX2's on a CPU without AVX-512), but the F16
	// file stays: a query after an idle spell is slower there, and on AVX2 nothing
	// is faster.
	skx := kernelsOn(t, "skylakex-avx512.cpuinfo", "", portable)
	skx.CPUAccel, skx.CPUAccelBF16 = "embed-stack kernels (AVX-512, BF16 in FMAs)", true
	if why, ok := PaysOff(skx); ok || !strings.Contains(why, "without AVX512_BF16") || !strings.Contains(why, "so the F16 file stays") {
		t.Errorf("Skylake-SP with embed-stack's BF16 products: %t (%s), want false", ok, why)
	}
	zen3 := kernelsOn(t, "zen3-avx2.cpuinfo", "", portable)
	zen3.CPUAccel, zen3.CPUAccelBF16 = "embed-stack kernels (AVX2, BF16)", true
	if why, ok := PaysOff(zen3); ok || why != "embed-stack kernels (AVX2, BF16) multiply BF16 in 256-bit float32 FMAs, no faster than ggml's F16 products there (0.77 to 0.91 times on the 0.6B shape), and F16 keeps 3 more bits" {
		t.Errorf("Zen 3 with embed-stack's AVX2 BF16 products: %t (%s), want false", ok, why)
	}
	esk.CPUAccelBF16, esk.GPU, esk.Name = true, true, "CUDA0"
	if _, ok := PaysOff(esk); ok {
		t.Errorf("on a GPU with CPUAccelBF16 set: pays off")
	}
}

// source writes a GGUF with an F16 matrix, an F32 matrix and an F32 norm.
func source(t *testing.T, dir string) string {
	t.Helper()
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	f16, _ := gguf.AppendEncoded(nil, gguf.TypeF16, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	f32, _ := gguf.AppendEncoded(nil, gguf.TypeF32, []float32{0.1, 0.2, 0.3, 0.4})
	fill := func(b []byte) func(io.Writer) error {
		return func(w io.Writer) error { _, err := w.Write(b); return err }
	}
	w.AddTensor("blk.0.attn_q.weight", gguf.TypeF16, []uint64{4, 2}, fill(f16))
	w.AddTensor("blk.0.ffn_up.weight", gguf.TypeF32, []uint64{2, 2}, fill(f32))
	w.AddTensor("blk.0.attn_norm.weight", gguf.TypeF32, []uint64{4}, fill(f32))
	p := filepath.Join(dir, "model.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// logBuf is a logger into a buffer, safe for the concurrent test.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func types(t *testing.T, path string) map[string]gguf.GGMLType {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]gguf.GGMLType{}
	for _, ti := range f.Tensors() {
		out[ti.Name] = ti.Type
	}
	return out
}

func deviceOf(d *backends.Device) func() (*backends.Device, error) {
	return func() (*backends.Device, error) { return d, nil }
}

// TestLoad: what each mode loads, the cached copy reused and replaced when the
// source changes, and the fallbacks to the file as it is.
func TestLoad(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := source(t, dir)
	cache := filepath.Join(dir, "cache")
	zen5 := kernelsOn(t, "zen5-avx512.cpuinfo", "", portable)
	haswell := kernelsOn(t, "zen5-avx512.cpuinfo", "haswell", portable)
	var log logBuf

	if r := Load(ctx, Request{Source: src, Mode: File, CacheDir: cache}, log.logger()); r.Path != src || r.Type != "F16" || r.Converted() {
		t.Fatalf("file: %+v", r)
	}
	if r := Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(haswell), CacheDir: cache}, log.logger()); r.Path != src || r.Converted() {
		t.Fatalf("auto on haswell kernels: %+v", r)
	}

	// A reranker keeps its weights under auto, even where BF16 pays, and converts
	// under bf16.
	if r := Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: cache, Rerank: true}, log.logger()); r.Path != src || r.Converted() || r.Type != "F16" {
		t.Fatalf("auto, a reranker on zen4 kernels: %+v", r)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Fatalf("auto wrote %d files for a reranker", len(entries))
	}
	if r := Load(ctx, Request{Source: src, Mode: BF16, CacheDir: filepath.Join(dir, "cache-rerank"), Rerank: true}, log.logger()); !r.Converted() || r.Type != "BF16" {
		t.Fatalf("bf16, a reranker: %+v", r)
	}

	auto := Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: cache}, log.logger())
	if !auto.Converted() || auto.Type != "BF16" || auto.From != "F16" || filepath.Dir(auto.Path) != cache {
		t.Fatalf("auto on zen4 kernels: %+v", auto)
	}
	want := map[string]gguf.GGMLType{"blk.0.attn_q.weight": gguf.TypeBF16, "blk.0.ffn_up.weight": gguf.TypeF32, "blk.0.attn_norm.weight": gguf.TypeF32}
	if got := types(t, auto.Path); !equalTypes(got, want) {
		t.Fatalf("auto converted %v, want %v", got, want)
	}
	if !strings.Contains(log.String(), "converted to BF16 at load") || !strings.Contains(log.String(), "seconds=") {
		t.Errorf("no conversion logged:\n%s", log.String())
	}

	// The second start loads the same copy without converting again.
	st1, _ := os.Stat(auto.Path)
	again := Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: cache}, log.logger())
	st2, _ := os.Stat(again.Path)
	if again != auto || !st1.ModTime().Equal(st2.ModTime()) || !strings.Contains(log.String(), "converted earlier") {
		t.Fatalf("second load %+v (first %+v), modified %v then %v", again, auto, st1.ModTime(), st2.ModTime())
	}

	// bf16 converts the F32 matrix as well, whatever the device says (asked only
	// whether to lay out panels: here it cannot tell).
	forced := Load(ctx, Request{Source: src, Mode: BF16, Device: func() (*backends.Device, error) {
		return nil, errors.New("no probe")
	}, CacheDir: cache}, log.logger())
	want["blk.0.ffn_up.weight"] = gguf.TypeBF16
	if got := types(t, forced.Path); !forced.Converted() || forced.Path == auto.Path || !equalTypes(got, want) {
		t.Fatalf("bf16: %+v, types %v", forced, got)
	}

	// A changed source is converted again and its outdated copy removed; the
	// other mode's copy stays.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(src, later, later); err != nil {
		t.Fatal(err)
	}
	fresh := Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: cache}, log.logger())
	if fresh.Path == auto.Path || !fresh.Converted() {
		t.Fatalf("changed source: %+v, first %+v", fresh, auto)
	}
	if _, err := os.Stat(auto.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("outdated copy %s: %v", auto.Path, err)
	}
	if _, err := os.Stat(forced.Path); err != nil {
		t.Errorf("the bf16 copy was removed: %v", err)
	}

	// A copy whose source is gone (a deleted model, a test's temporary file) is
	// removed by the next conversion, with its record.
	gone := source(t, t.TempDir())
	old := Load(ctx, Request{Source: gone, Mode: Auto, Device: deviceOf(zen5), CacheDir: cache}, log.logger())
	if b, err := os.ReadFile(old.Path + sourceSuffix); err != nil || filepath.Base(string(b)) != "model.gguf" {
		t.Fatalf("record of %s: %q, %v", old.Path, b, err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src, later.Add(time.Hour), later.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: cache}, log.logger())
	for _, p := range []string{old.Path, old.Path + sourceSuffix} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s of a deleted source: %v", p, err)
		}
	}
	if _, err := os.Stat(forced.Path); err != nil {
		t.Errorf("the bf16 copy, whose source is there, was removed: %v", err)
	}
}

func equalTypes(a, b map[string]gguf.GGMLType) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestLoadFallsBack: a cache that cannot be written, a device that cannot be
// probed, and no cache folder all keep the file, with a warning; the server is
// never stopped.
func TestLoadFallsBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := source(t, dir)
	zen5 := kernelsOn(t, "zen5-avx512.cpuinfo", "", portable)
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		req  Request
		warn string
	}{
		{"cache is a file", Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: notDir}, "converting to BF16 failed"},
		{"no cache", Request{Source: src, Mode: BF16}, "no cache folder"},
		{"probe fails", Request{Source: src, Mode: Auto, Device: func() (*backends.Device, error) { return nil, errors.New("no ggml") }, CacheDir: dir}, "cannot tell which CPU kernels"},
		{"bad mode", Request{Source: src, Mode: "fp8", CacheDir: dir}, `unknown weights mode`},
	} {
		var log logBuf
		r := Load(ctx, tt.req, log.logger())
		if r.Path != src || r.Converted() || r.Type != "F16" {
			t.Errorf("%s: %+v", tt.name, r)
		}
		if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), tt.warn) {
			t.Errorf("%s: want a warning %q, log:\n%s", tt.name, tt.warn, log.String())
		}
	}
}

// TestLoadConvertsOnce: two loads at once (two servers starting together) convert
// once, under the lock, and both load the same copy.
func TestLoadConvertsOnce(t *testing.T) {
	dir := t.TempDir()
	src := source(t, dir)
	zen5 := kernelsOn(t, "zen5-avx512.cpuinfo", "", portable)
	var log logBuf
	var wg sync.WaitGroup
	results := make([]Result, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = Load(context.Background(), Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: filepath.Join(dir, "cache")}, log.logger())
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r != results[0] || !r.Converted() {
			t.Fatalf("results differ: %+v", results)
		}
	}
	if n := strings.Count(log.String(), "converted to BF16 at load"); n != 1 {
		t.Errorf("converted %d times, want once:\n%s", n, log.String())
	}
	// The conversion's bytes: F16 values become BF16 exactly (small integers).
	f, err := gguf.Open(results[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vals, err := f.TensorFloat64("blk.0.attn_q.weight")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != float64(i+1) {
			t.Fatalf("value %d is %v, want %d", i, v, i+1)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]string{"": Auto, "AUTO": Auto, " file ": File, "bf16": BF16} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseMode("f16"); err == nil || err.Error() != `unknown weights mode "f16": choose auto, file, bf16` {
		t.Errorf("f16: %v", err)
	}
}

// TestPlanKeepsAddedMatrices: BERT's position and token-type embeddings, which
// llama.cpp adds to the activations, and T5's relative attention bias stay as they
// are under every mode; vectors and non-weight tensors too.
func TestPlanKeepsAddedMatrices(t *testing.T) {
	m := func(name string, typ gguf.GGMLType) gguf.TensorInfo {
		return gguf.TensorInfo{Name: name, Type: typ, Dims: []uint64{32, 4}}
	}
	tensors := []gguf.TensorInfo{
		m("token_embd.weight", gguf.TypeF16), m("blk.0.attn_q.weight", gguf.TypeF16), m("cls.output.weight", gguf.TypeF32),
		m("position_embd.weight", gguf.TypeF16), m("token_types.weight", gguf.TypeF32), m("enc.blk.0.attn_rel_b.weight", gguf.TypeF16),
		{Name: "blk.0.attn_norm.weight", Type: gguf.TypeF16, Dims: []uint64{32}}, m("rope_freqs", gguf.TypeF16),
	}
	for mode, want := range map[string][]string{
		Auto: {"token_embd.weight", "blk.0.attn_q.weight"},
		BF16: {"token_embd.weight", "blk.0.attn_q.weight", "cls.output.weight"},
	} {
		p := planFor(mode, tensors)
		var got []string
		for _, ti := range tensors {
			if p.converts(ti) {
				got = append(got, ti.Name)
			}
		}
		if !slices.Equal(got, want) || p.tensors != len(want) {
			t.Errorf("%s converts %v (%d), want %v", mode, got, p.tensors, want)
		}
	}
}

// TestDescribe: the words the bench report gives the floor's weights.
func TestDescribe(t *testing.T) {
	for _, tt := range []struct {
		r    Result
		want string
	}{
		{Result{Path: "m.gguf", Type: "F16"}, "F16 (the file's)"},
		{Result{Path: "c.gguf", Type: "BF16", From: "F16"}, "BF16 (converted from F16)"},
		{Result{Path: "m.gguf"}, "unknown (the file's)"},
	} {
		if got := tt.r.Describe(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.r, got, tt.want)
		}
	}
}

// TestLoadQ8_0: auto keeps a Q8_0 file's matrices even where BF16 pays (its memory
// would grow 1.9 times); bf16 converts them, each value the BF16 rounding of the
// file's (an int8 times its block's F16 scale), into a copy named for Q8_0, beside
// which an F16 file's bf16 copy keeps its name.
func TestLoadQ8_0(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	values := make([]float32, 64)
	for i := range values {
		values[i] = float32(i%17-8) * 0.013 * float32(1+i/32)
	}
	q8, err := gguf.AppendEncoded(nil, gguf.TypeQ8_0, values)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	w.AddTensor("blk.0.attn_q.weight", gguf.TypeQ8_0, []uint64{32, 2}, func(w io.Writer) error { _, err := w.Write(q8); return err })
	src := filepath.Join(dir, "model-q8_0.gguf")
	if err := w.WriteFile(src); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	zen5 := kernelsOn(t, "zen5-avx512.cpuinfo", "", portable)
	var log logBuf
	if r := Load(ctx, Request{Source: src, Mode: Auto, Device: deviceOf(zen5), CacheDir: cache}, log.logger()); r.Path != src || r.Converted() || r.Type != "Q8_0" {
		t.Fatalf("auto on zen4 kernels, a Q8_0 file: %+v, want it as it is", r)
	}
	r := Load(ctx, Request{Source: src, Mode: BF16, CacheDir: cache}, log.logger())
	if !r.Converted() || r.Type != "BF16" || r.From != "Q8_0" || !strings.HasSuffix(r.Path, ".bf16-f16-f32-q8_0.gguf") {
		t.Fatalf("bf16, a Q8_0 file: %+v", r)
	}
	read := func(path string) []float64 {
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		v, err := f.TensorFloat64("blk.0.attn_q.weight")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	file, conv := read(src), read(r.Path)
	for i := range file {
		b, _ := gguf.AppendEncoded(nil, gguf.TypeBF16, []float32{float32(file[i])})
		want, _ := gguf.Decode(gguf.TypeBF16, b)
		if conv[i] != want[0] || file[i] != 0 && conv[i] == 0 {
			t.Fatalf("value %d: %g in the copy, want %g (the file's %g rounded to BF16)", i, conv[i], want[0], file[i])
		}
	}
	if f16 := Load(ctx, Request{Source: source(t, dir), Mode: BF16, CacheDir: cache}, log.logger()); !strings.HasSuffix(f16.Path, ".bf16-f16-f32.gguf") {
		t.Errorf("bf16, an F16 file: %s, want the name it always had", f16.Path)
	}
}

package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/reference"
	"github.com/embed-stack/embed-stack/routing"
	"golang.org/x/sys/cpu"
)

// modelWeights is what /info and /v1/models say of a model's weights.
type modelWeights struct {
	ID            string `json:"id"`
	Weights       string `json:"weights"`
	ConvertedFrom string `json:"weights_converted_from"`
}

// servedWeights returns each model's weights by id, from /info and from /v1/models,
// failing the test where the two disagree.
func servedWeights(t *testing.T, url string) map[string]modelWeights {
	t.Helper()
	var info struct {
		Models []modelWeights `json:"models"`
	}
	var list struct {
		Data []modelWeights `json:"data"`
	}
	if !getJSON(t, url+"/info", &info) || !getJSON(t, url+"/v1/models", &list) {
		t.Fatalf("GET %s/info or /v1/models failed", url)
	}
	out := map[string]modelWeights{}
	for _, m := range info.Models {
		out[m.ID] = m
	}
	for _, m := range list.Data {
		if i, ok := out[m.ID]; ok && i != m {
			t.Errorf("model %s: /info says %+v, /v1/models %+v", m.ID, i, m)
		}
	}
	return out
}

// convertedFiles lists the converted GGUFs in a weights cache.
func convertedFiles(t *testing.T, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	return matches
}

// TestServeWeightsBF16 serves the tiny Qwen3 model twice in one server, its F16
// matrices converted to BF16 at load (--weights bf16) and as the file is (--weights
// file), and holds the converted model's vectors to the float64 reference and to
// the F16 path of the same binary (cosine ≥ 0.9999 each), with /info and /v1/models
// saying which weights each model computes with, the log saying what was converted,
// and the converted file in --weights-cache. A second start loads that file again
// without converting.
func TestServeWeightsBF16(t *testing.T) {
	_, model := e2e.Paths(t)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	fileType := f.WeightType().String()
	f.Close()
	ref, err := reference.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	seqs := variantSeqs(ref.Config().Vocab)
	cache := t.TempDir()
	s := serveWith(t, "--model", "bf16="+model, "--model", "f16="+model, "--weights", "bf16=bf16", "--weights", "f16=file",
		"--weights-cache", cache, "--token-ids", "native")
	w := servedWeights(t, s.URL)
	if got := w["bf16"]; got.Weights != "BF16" || got.ConvertedFrom != fileType {
		t.Errorf("bf16 model: %+v, want weights BF16 converted from %s", got, fileType)
	}
	if got := w["f16"]; got.Weights != fileType || got.ConvertedFrom != "" {
		t.Errorf("f16 model: %+v, want weights %s as the file is", got, fileType)
	}
	files := convertedFiles(t, cache)
	if len(files) != 1 {
		t.Fatalf("weights cache holds %v, want one converted file", files)
	}
	out := s.Out.String()
	if !strings.Contains(out, `msg="weights: converted to BF16 at load"`) || !strings.Contains(out, "file="+files[0]) {
		t.Errorf("the log does not say what was converted:\n%s", out)
	}
	conv, err := gguf.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range conv.Tensors() {
		if len(ti.Dims) >= 2 && ti.Type != gguf.TypeBF16 || len(ti.Dims) < 2 && ti.Type == gguf.TypeBF16 {
			t.Errorf("converted file: tensor %s %v is %s", ti.Name, ti.Dims, ti.Type)
		}
	}
	conv.Close()

	bf16 := e2e.Embeddings(t, s.URL, map[string]any{"model": "bf16", "input": seqs})
	f16 := e2e.Embeddings(t, s.URL, map[string]any{"model": "f16", "input": seqs})
	for i, seq := range seqs {
		want, err := ref.LastToken(append(toInt32(seq), routing.EOS))
		if err != nil {
			t.Fatal(err)
		}
		cr, cf, fr := e2e.Cosine(bf16[i], want), e2e.Cosine(bf16[i], f16[i]), e2e.Cosine(f16[i], want)
		t.Logf("%d tokens: BF16 cosine %.9f to the float64 reference, %.9f to F16 (F16 to the reference %.9f)", len(seq), cr, cf, fr)
		if !(cr >= 0.9999) || !(cf >= 0.9999) {
			t.Errorf("%d tokens: BF16 weights give cosine %.9f to the reference and %.9f to F16, want ≥ 0.9999 each", len(seq), cr, cf)
		}
	}
	s.Stop()

	again := serveWith(t, "--model", model, "--weights", "bf16", "--weights-cache", cache)
	if out := again.Out.String(); !strings.Contains(out, `msg="weights: loading BF16 weights converted earlier"`) || strings.Contains(out, "converted to BF16 at load") {
		t.Errorf("second start did not reuse the converted file:\n%s", out)
	}
	if files := convertedFiles(t, cache); len(files) != 1 {
		t.Errorf("weights cache after the second start: %v", files)
	}
}

// TestServeWeightsBF16FromQ8_0 serves a Q8_0 copy of the tiny Qwen3 model (its
// matrices quantized by package gguf, as llama.cpp's quantizer does) three ways in
// one server: --weights bf16 (its Q8_0 matrices converted to BF16 at load), file,
// and auto, which keeps a Q8_0 file on every host. The BF16 copy's vectors are held
// to the float64 reference of the Q8_0 file's own values at cosine ≥ 0.9999 (the bar
// of BF16 converted from F16), and where ggml takes the Q8_0 file's products no
// further from it than the file's (ggml's Q8_0 products round the activations to
// int8 as well: 0.99988 to 0.99995 here, where the BF16 copy gave 0.99998 to
// 0.99999); where embed-stack's kernels take them, the same BF16 products, the copy
// also rounds its token embeddings to BF16, so the two are held to each other at
// cosine ≥ 0.9999 instead. /info says which weights each model computes with. The
// Q8_0 file itself, served as it is, goes through embed-stack's kernels where they
// multiply BF16 (/health's cpu_accel_bf16), every
// product of every call, however few its rows. Its vectors must then differ from
// those of a server with --cpu-accel off (ggml's Q8_0 products), each be within
// cosine 0.9999 of the reference, on average no further from it (0.99994 to 0.99999
// against 0.99988 to 0.99995 on the Emerald Rapids host), and be the same bits when
// each sequence is sent alone as in the request of six (479 tokens packed into one
// call): a vector must not depend on its company.
func TestServeWeightsBF16FromQ8_0(t *testing.T) {
	_, model := e2e.Paths(t)
	q8 := filepath.Join(t.TempDir(), "tiny-q8_0.gguf")
	if err := gguf.QuantizeQ8_0(model, q8); err != nil {
		t.Fatal(err)
	}
	ref, err := reference.Load(q8)
	if err != nil {
		t.Fatal(err)
	}
	seqs := variantSeqs(ref.Config().Vocab)
	cache := t.TempDir()
	s := serveWith(t, "--model", "bf16="+q8, "--model", "q8="+q8, "--model", "auto="+q8,
		"--weights", "bf16=bf16", "--weights", "q8=file", "--weights-cache", cache, "--token-ids", "native")
	w := servedWeights(t, s.URL)
	for id, want := range map[string]modelWeights{
		"bf16": {ID: "bf16", Weights: "BF16", ConvertedFrom: "Q8_0"},
		"q8":   {ID: "q8", Weights: "Q8_0"},
		"auto": {ID: "auto", Weights: "Q8_0"},
	} {
		if got := w[id]; got != want {
			t.Errorf("model %s: %+v, want %+v", id, got, want)
		}
	}
	if files := convertedFiles(t, cache); len(files) != 1 || !strings.Contains(files[0], ".bf16-f16-f32-q8_0") {
		t.Errorf("weights cache holds %v, want one copy converted from Q8_0", files)
	}
	bf16 := e2e.Embeddings(t, s.URL, map[string]any{"model": "bf16", "input": seqs})
	q := e2e.Embeddings(t, s.URL, map[string]any{"model": "q8", "input": seqs})
	accel := healthDevice(t, s.URL).CPUAccelBF16
	for i, seq := range seqs {
		want, err := ref.LastToken(append(toInt32(seq), routing.EOS))
		if err != nil {
			t.Fatal(err)
		}
		cr, cq, qr := e2e.Cosine(bf16[i], want), e2e.Cosine(bf16[i], q[i]), e2e.Cosine(q[i], want)
		t.Logf("%d tokens: BF16 from Q8_0, cosine %.9f to the float64 reference, %.9f to Q8_0 (Q8_0 to the reference %.9f)", len(seq), cr, cq, qr)
		switch {
		case !(cr >= 0.9999):
			t.Errorf("%d tokens: BF16 weights from Q8_0 give cosine %.9f to the reference; want ≥ 0.9999", len(seq), cr)
		case !accel && !(cr >= qr-1e-6):
			// ggml's Q8_0 products: int8 activations
			t.Errorf("%d tokens: BF16 weights from Q8_0 give cosine %.9f to the reference, ggml's Q8_0 products %.9f; want no lower", len(seq), cr, qr)
		case accel && !(cq >= 0.9999):
			// the same BF16 products; the copy's token embeddings rounded to BF16
			t.Errorf("%d tokens: BF16 weights from Q8_0, cosine %.9f to the Q8_0 file's vector through the same kernels; want ≥ 0.9999", len(seq), cq)
		}
	}
	if !accel {
		return
	}
	g := serveWith(t, "--model", "q8="+q8, "--cpu-accel", "off", "--token-ids", "native")
	ggml := e2e.Embeddings(t, g.URL, map[string]any{"model": "q8", "input": seqs})
	var errESK, errGGML float64
	for i, seq := range seqs {
		want, err := ref.LastToken(append(toInt32(seq), routing.EOS))
		if err != nil {
			t.Fatal(err)
		}
		qr, gr := e2e.Cosine(q[i], want), e2e.Cosine(ggml[i], want)
		t.Logf("%d tokens: Q8_0 through embed-stack's kernels, cosine %.9f to the float64 reference; through ggml's %.9f", len(seq), qr, gr)
		if !(qr >= 0.9999) {
			t.Errorf("%d tokens: Q8_0 through embed-stack's kernels, cosine %.9f to the reference; want ≥ 0.9999", len(seq), qr)
		}
		if slices.Equal(q[i], ggml[i]) {
			t.Errorf("%d tokens: the same vector with --cpu-accel off; want embed-stack's kernels to have taken the Q8_0 products", len(seq))
		}
		errESK += 1 - qr
		errGGML += 1 - gr
		alone := e2e.Embeddings(t, s.URL, map[string]any{"model": "q8", "input": []any{seq}})
		if !slices.Equal(alone[0], q[i]) {
			t.Errorf("%d tokens: Q8_0 through embed-stack's kernels, sent alone: cosine %.9f to the vector in the request of %d; want the same bits", len(seq), e2e.Cosine(alone[0], q[i]), len(seqs))
		}
	}
	if !(errESK <= errGGML) {
		t.Errorf("Q8_0 through embed-stack's kernels: mean 1-cosine %.3g to the reference, through ggml's %.3g; want no more", errESK/float64(len(seqs)), errGGML/float64(len(seqs)))
	}
}

// TestServeWeightsAuto: under --weights auto (the default) the F16 file is
// converted exactly where the kernels that take the workers' weight products have
// AVX-512 BF16: embed-stack's own where they multiply BF16 (/health's
// cpu_accel_bf16, on a CPU with AVX512_BF16), else ggml's variant's. Checked with
// the kernels `embed-stack devices --json` reports for serve's defaults, then the
// test's CPU variant forced (EMBED_STACK_CPU_VARIANT: zen4 on Zen 4/5 converts,
// haswell on an AVX2 host does not), and, where its library is there too, the AVX2
// variant haswell forced on any host: converted where embed-stack's kernels
// multiply BF16, and with --cpu-accel off never (the haswell kernels have no BF16
// dot product), the file then served as it is and nothing written to the cache.
// On an Intel CPU it is converted only where embed-stack's kernels take the products
// (in float32 FMAs), never for ggml's variant (its BF16 dot products do half the
// arithmetic of the cores' FMAs: weights.PaysOff).
// Where embed-stack's kernels take the products, the copy holds the layers'
// matrices in their panel layout (its name ends -esk32.gguf), which the workers map.
func TestServeWeightsAuto(t *testing.T) {
	bin, model := e2e.Paths(t)
	if f, err := gguf.Open(model); err != nil || f.WeightType() != gguf.TypeF16 {
		t.Fatalf("%s: want an F16 model (%v)", model, err)
	} else {
		f.Close()
	}
	// panels: the copy holds the layers' matrices in the layout of embed-stack's
	// BF16 kernels, which take the products (cpu_accel_bf16).
	check := func(t *testing.T, url, cache, kernels string, bf16, panels bool) {
		t.Helper()
		got := servedWeights(t, url)["m"]
		files := convertedFiles(t, cache)
		if bf16 && (got.Weights != "BF16" || got.ConvertedFrom != "F16" || len(files) != 1 || strings.HasSuffix(files[0], "-esk32.gguf") != panels) ||
			!bf16 && (got.Weights != "F16" || got.ConvertedFrom != "" || len(files) != 0) {
			t.Errorf("auto on %s kernels (AVX512_BF16: %t, panels %t): %+v, cache %v", kernels, bf16, panels, got, files)
		}
		t.Logf("auto on %s kernels: weights %s, converted from %q", kernels, got.Weights, got.ConvertedFrom)
	}

	code, stdout, stderr := runBin(t, bin, "devices", "--json")
	var dev backends.Device
	if code != 0 || json.Unmarshal([]byte(stdout), &dev) != nil {
		t.Fatalf("devices --json: exit %d\n%s%s", code, stdout, stderr)
	}
	// The text of devices says what auto does with its weights line.
	_, text, _ := runBin(t, bin, "devices")
	want := "weights: --weights auto loads F16 files as they are"
	intel := cpuvariant.ReadHost().Vendor == cpuvariant.VendorIntel
	switch {
	case dev.CPUAccelBF16 && strings.Contains(dev.CPUAccel, "AMX"):
		want = "weights: --weights auto converts F16 matrices to BF16 at load, the layers' matrices in those kernels' panels, which every worker maps: embed-stack kernels (AVX-512, BF16, AMX) multiply BF16 in AMX tiles"
	case intel && dev.CPUAccelBF16:
		want = "weights: --weights auto converts F16 matrices to BF16 at load, the layers' matrices in those kernels' panels, which every worker maps: embed-stack kernels (AVX-512, BF16) multiply BF16 in float32 FMAs"
	case intel && slices.Contains(dev.CPUFeatures, cpuvariant.BF16):
		want = "weights: --weights auto loads F16 files as they are: the CPU kernels"
	case dev.CPUAccelBF16:
		want = "weights: --weights auto converts F16 matrices to BF16 at load, the layers' matrices in those kernels' panels, which every worker maps: embed-stack kernels (AVX-512, BF16) multiply BF16"
	case slices.Contains(dev.CPUFeatures, cpuvariant.BF16):
		want = "weights: --weights auto converts F16 matrices to BF16 at load: the CPU kernels"
	}
	if !strings.Contains(text, want) {
		t.Errorf("devices says\n%s\nwant a line with %q", text, want)
	}
	cache := t.TempDir()
	// Beside it a reranker, whose weights auto keeps wherever it runs (its score
	// is held to the file's): the one converted file is the embedding model's.
	reranker := filepath.Join(filepath.Dir(model), "tiny-reranker.gguf")
	s := serveWith(t, "--model", "m="+model, "--model", "rr="+reranker, "--weights-cache", cache)
	if d := healthDevice(t, s.URL); d.CPUAccelBF16 != dev.CPUAccelBF16 || d.CPUAccelBF16 != (cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16) {
		t.Errorf("cpu_accel_bf16: /health %t, devices %t, want %t (this CPU's AVX-512F with AVX512_BF16)", d.CPUAccelBF16, dev.CPUAccelBF16, cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16)
	}
	if dev.CPUVendor != cpuvariant.ReadHost().Vendor {
		t.Errorf("devices --json: cpu_vendor %q, want this CPU's %q", dev.CPUVendor, cpuvariant.ReadHost().Vendor)
	}
	check(t, s.URL, cache, dev.CPUVariant+" ("+strings.Join(dev.CPUFeatures, " ")+"), "+dev.CPUAccel, dev.CPUAccelBF16 || !intel && slices.Contains(dev.CPUFeatures, cpuvariant.BF16), dev.CPUAccelBF16)
	if got := servedWeights(t, s.URL)["rr"]; got.Weights != "F16" || got.ConvertedFrom != "" {
		t.Errorf("auto, the reranker: %+v, want its F16 weights as the file has them", got)
	}
	s.Stop()

	name, _ := testVariant(t)
	forced := []string{name}
	src := variantSource(t)
	if _, err := os.Stat(filepath.Join(src, cpuvariant.LibraryPrefix+"haswell.so")); err == nil && name != "haswell" {
		forced = append(forced, "haswell")
	}
	for _, v := range forced {
		for _, accel := range []string{"auto", "off"} {
			cache := t.TempDir()
			t.Setenv("EMBED_STACK_CPU_VARIANT", v)
			s := serveWith(t, "--model", "m="+model, "--backend-dir", variantDir(t, src, v), "--weights-cache", cache, "--cpu-accel", accel)
			d := healthDevice(t, s.URL)
			if d.CPUVariant != v {
				t.Fatalf("/health device %+v, want the %s variant", d, v)
			}
			esk := accel == "auto" && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16
			if d.CPUAccelBF16 != esk {
				t.Errorf("%s, --cpu-accel %s: /health cpu_accel_bf16 %t, want %t", v, accel, d.CPUAccelBF16, esk)
			}
			check(t, s.URL, cache, v+", --cpu-accel "+accel, esk || !intel && cpuvariant.Find(runtime.GOARCH, v).Uses("avx512_bf16"), esk)
			s.Stop()
		}
	}
}

// TestServeKeepsOutOfTheUsersWeightsCache: a server the tests start converts into
// the test binary's temporary folder (e2e.Main), never into the weights cache of
// the user's home, which the suites had filled with copies of their temporary
// models. Started through the harness with HOME a temporary folder and no HF_* or
// XDG_CACHE_HOME variable, so that serve's default --weights-cache lies under that
// HOME, and with --weights bf16, which converts on any CPU, it serves BF16
// converted from F16, after a request the converted file lies in
// e2e.WeightsCache() with the model recorded as its source, and no GGUF file nor
// Hugging Face folder was written under HOME. Without the TestMain the file is
// HOME/.cache/huggingface/embed-stack/weights/*.gguf.
func TestServeKeepsOutOfTheUsersWeightsCache(t *testing.T) {
	bin, model := e2e.Paths(t)
	home := t.TempDir()
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "HOME" || k == "XDG_CACHE_HOME" || k == "HUGGINGFACE_HUB_CACHE" || strings.HasPrefix(k, "HF_")
	})
	s, err := e2e.StartServe(e2e.ServeSpec{Bin: bin, Env: append(env, "HOME="+home), Group: true,
		Flags: []string{"--model", "m=" + model, "--threads", "1", "--weights", "bf16"}}, e2e.ReadyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	if got := servedWeights(t, s.URL)["m"]; got.Weights != "BF16" || got.ConvertedFrom != "F16" {
		t.Fatalf("served %+v, want BF16 converted from F16 at load", got)
	}
	if v := e2e.Embeddings(t, s.URL, map[string]any{"model": "m", "input": "a text to embed"}); len(v) != 1 {
		t.Fatalf("%d vectors, want 1", len(v))
	}
	if err := s.Stop(); err != nil {
		t.Errorf("stop: %v\n%s", err, s.Out)
	}

	// (serve also keeps the models' digests in ~/.cache/embed-stack/digests, a
	// few bytes each, which is not this test's business.)
	var written []string
	if err := filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err == nil && (strings.Contains(path, "huggingface") || strings.HasSuffix(path, ".gguf")) {
			written = append(written, path)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(written) > 0 {
		t.Errorf("the server wrote weights under HOME: %v", written)
	}
	source, err := filepath.EvalSymlinks(model)
	if err != nil {
		t.Fatal(err)
	}
	if source, err = filepath.Abs(source); err != nil {
		t.Fatal(err)
	}
	// The other tests of this binary convert there too (under auto: *.bf16-f16.gguf).
	var ours []string
	for _, f := range convertedFiles(t, e2e.WeightsCache()) {
		if b, err := os.ReadFile(f + ".source"); err == nil && string(b) == source && strings.Contains(f, ".bf16-f16-f32") {
			ours = append(ours, f)
		}
	}
	if len(ours) != 1 {
		t.Errorf("the test binary's weights cache %s holds %v converted by --weights bf16 from %s, want one file", e2e.WeightsCache(), ours, source)
	}
}

// TestServeMiniLMWeightsBF16 serves the real all-MiniLM-L6-v2 F16 GGUF with its
// matrices converted to BF16 at load, and holds its vectors to the float64 forward
// pass of the original checkpoint for the 209 reference texts, with the same
// nearest neighbour for every retrieval query. The F16 file itself reaches cosine
// 0.999 or more (TestServeMiniLMRealWeights); BF16's 8-bit significand, against
// F16's 11, loses more.
func TestServeMiniLMWeightsBF16(t *testing.T) {
	model := encoderModel(t, "models/minilm-f16.gguf")
	ref, want := readMiniLMReference(t)
	s := serveWith(t, "--model", "m="+model, "--weights", "bf16", "--weights-cache", t.TempDir())
	if got := servedWeights(t, s.URL)["m"]; got.Weights != "BF16" || got.ConvertedFrom != "F16" {
		t.Fatalf("minilm: %+v, want BF16 converted from F16", got)
	}
	got := e2e.Embeddings(t, s.URL, map[string]any{"model": "m", "input": ref.Texts})
	lowest, at, sum := 1.0, 0, 0.0
	for i := range got {
		c := e2e.Cosine(got[i], want[i])
		sum += c
		if c < lowest {
			lowest, at = c, i
		}
	}
	t.Logf("BF16 from F16: %d texts, lowest cosine %.7f (text %d), mean %.7f", len(got), lowest, at, sum/float64(len(got)))
	if lowest < miniLMBF16Cosine {
		t.Errorf("text %d %q: cosine %.7f with the reference, want ≥ %g", at, ref.Texts[at], lowest, miniLMBF16Cosine)
	}
	for _, q := range ref.Queries {
		if a, b := nearestText(got, q), nearestText(want, q); a != b {
			t.Errorf("query %q: the server's nearest text is %q, the reference's %q", ref.Texts[q], ref.Texts[a], ref.Texts[b])
		}
	}
}

// miniLMBF16Cosine is the bar of MiniLM's BF16 vectors against the float64
// reference: the lowest of the 209 texts was 0.9999553 on the Zen 5 host
// (docs/models.md), F16's own 0.9999971.
const miniLMBF16Cosine = 0.9999

// TestServeEveryArchitectureBF16 serves the random-weight GGUF of every
// architecture twice, as the file is and with --weights bf16 (F16 and F32 matrices
// converted), and requires the converted one to load, say BF16 in /info, and give
// vectors of cosine ≥ 0.999 to the file's: a matrix that llama.cpp adds to the
// activations rather than multiplies (BERT's position and token-type embeddings)
// must stay as it is, since ggml's CPU kernels add no BF16 operand and the worker
// would abort.
func TestServeEveryArchitectureBF16(t *testing.T) {
	_, qwen := e2e.Paths(t)
	models := map[string]string{"qwen3": qwen}
	for _, m := range []string{"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "neo-bert", "gemma-embedding", "t5encoder"} {
		models[m] = encoderModel(t, "models/"+m+"-tiny.gguf")
	}
	args := []string{"--weights", "file", "--weights-cache", t.TempDir()}
	for name, path := range models {
		args = append(args, "--model", name+"="+path, "--model", name+"-bf16="+path, "--weights", name+"-bf16=bf16")
	}
	s := serveWith(t, args...)
	w := servedWeights(t, s.URL)
	texts := []string{"hello world", "a second, longer text about something else entirely", strings.Repeat("many words ", 80)}
	for name := range models {
		if got := w[name+"-bf16"]; got.Weights != "BF16" || got.ConvertedFrom == "" {
			t.Errorf("%s-bf16: %+v, want BF16 converted at load", name, got)
		}
		file := e2e.Embeddings(t, s.URL, map[string]any{"model": name, "input": texts})
		conv := e2e.Embeddings(t, s.URL, map[string]any{"model": name + "-bf16", "input": texts})
		for i := range texts {
			c := e2e.Cosine(file[i], conv[i])
			t.Logf("%s: text %d, BF16 to the file's weights: cosine %.7f", name, i, c)
			if !(c >= 0.999) {
				t.Errorf("%s: text %d, cosine %.7f between BF16 and the file's weights, want ≥ 0.999", name, i, c)
			}
		}
	}
}

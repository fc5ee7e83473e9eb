package main

import (
	"fmt"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/reference"
	"github.com/embed-stack/embed-stack/routing"
)

// testVariant finds the CPU kernel variant the end-to-end tests load: the best one
// this CPU runs among the libraries of lib/embed-stack (EMBED_STACK_CPU_VARIANT_DIR
// overrides the folder; `make test` builds the one it needs with `make
// cpu-variants`). It returns a fresh backend folder holding that library and the
// libggml-base it links against, so that each test decides what else is there.
// A CPU that can run no variant at all skips the test.
func testVariant(t *testing.T) (name, dir string) {
	t.Helper()
	host := cpuvariant.ReadHost()
	var usable []string
	for _, v := range cpuvariant.ForArch(host.Arch) {
		if len(host.Missing(v)) == 0 {
			usable = append(usable, v.Name)
		}
	}
	if len(usable) == 0 {
		t.Skipf("this CPU (%s) can run no CPU variant of %s", host.Model, host.Arch)
	}
	src := variantSource(t)
	for _, v := range slices.Backward(usable) {
		if _, err := os.Stat(filepath.Join(src, cpuvariant.LibraryPrefix+v+".so")); err == nil {
			name = v
			break
		}
	}
	if name == "" {
		e2e.Require(t, fmt.Sprintf("no CPU variant library this CPU runs (%s) in %s: run `make cpu-variants CPU_VARIANTS=%s`", strings.Join(usable, ", "), src, usable[0]))
	}
	return name, variantDir(t, src, name)
}

// variantSource is the folder of the variant libraries the tests load:
// EMBED_STACK_CPU_VARIANT_DIR, else lib/embed-stack.
func variantSource(t *testing.T) string {
	if src := testenv.Get("EMBED_STACK_CPU_VARIANT_DIR"); src != "" {
		return src
	}
	return filepath.Join(e2e.RepoRoot(t), "lib", "embed-stack")
}

// variantDir is a fresh backend folder holding src's library of the variant
// name and the libggml-base it links against, so that each test decides what
// else is there.
func variantDir(t *testing.T, src, name string) string {
	t.Helper()
	dir := t.TempDir()
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "libggml-base.so") || e.Name() == cpuvariant.LibraryPrefix+name+".so" {
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// healthDevice is serve's /health "device" (the warm worker's).
func healthDevice(t *testing.T, url string) *backends.Device {
	t.Helper()
	var h struct {
		Device *backends.Device `json:"device"`
	}
	if !getJSON(t, url+"/health", &h) {
		t.Fatalf("GET %s/health failed", url)
	}
	if h.Device == nil {
		t.Fatalf("/health has no device")
	}
	return h.Device
}

// variantSeqs are token-id inputs (so that the float64 reference needs no
// tokenizer), of lengths that cross the kernels' block sizes.
func variantSeqs(vocab int) [][]int {
	var seqs [][]int
	for i, n := range []int{1, 7, 32, 33, 100, 300} {
		s := make([]int, n)
		for j := range s {
			s[j] = (i*7919 + j*104729 + 13) % vocab
		}
		seqs = append(seqs, s)
	}
	return seqs
}

// TestCPUVariantServe: a worker started with --cpu-variant runs that library,
// says so in /health, /info and its log, and its vectors hold the float64
// reference to the same bar as the compiled-in kernels' (cosine ≥ 0.9999), and
// the compiled-in kernels' own vectors to cosine ≥ 0.99999.
func TestCPUVariantServe(t *testing.T) {
	name, dir := testVariant(t)
	_, model := e2e.Paths(t)
	ref, err := reference.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	seqs := variantSeqs(ref.Config().Vocab)
	vectors := map[string][][]float64{}
	for _, want := range []string{name, cpuvariant.Builtin} {
		// --weights file: the same weights for both kernels, which --weights auto
		// would convert to BF16 for the one with AVX-512 BF16 only.
		s := e2e.Serve(t, "--backend-dir", dir, "--cpu-variant", want, "--token-ids", "native", "--weights", "file")
		d := healthDevice(t, s.URL)
		if d.CPUVariant != want || d.Warning != "" {
			t.Fatalf("--cpu-variant %s: /health device %+v", want, d)
		}
		var info struct {
			CPUVariant string `json:"cpu_variant"`
		}
		if !getJSON(t, s.URL+"/info", &info) {
			t.Fatalf("GET %s/info failed", s.URL)
		}
		if info.CPUVariant != want {
			t.Errorf("--cpu-variant %s: /info cpu_variant %q", want, info.CPUVariant)
		}
		if log := s.Out.String(); !strings.Contains(log, "cpu_variant="+want) {
			t.Errorf("--cpu-variant %s: the worker's log does not name it:\n%s", want, log)
		}
		vectors[want] = e2e.Embeddings(t, s.URL, map[string]any{"input": seqs})
		s.Stop()
	}
	identical := true
	for i, seq := range seqs {
		// The server closes every input with <|endoftext|>.
		want, err := ref.LastToken(append(toInt32(seq), routing.EOS))
		if err != nil {
			t.Fatal(err)
		}
		v, b := vectors[name][i], vectors[cpuvariant.Builtin][i]
		cv, cb, vb := e2e.Cosine(v, want), e2e.Cosine(b, want), e2e.Cosine(v, b)
		t.Logf("%d tokens: cosine to the float64 reference %s %.9f, builtin %.9f; %s to builtin %.9f", len(seq), name, cv, cb, name, vb)
		if !(cv >= 0.9999) || !(vb >= 0.99999) {
			t.Errorf("%d tokens: %s cosine %.9f to the reference (want ≥ 0.9999), %.9f to the compiled-in kernels (want ≥ 0.99999)", len(seq), name, cv, vb)
		}
		for j := range v {
			if math.Float32bits(float32(v[j])) != math.Float32bits(float32(b[j])) {
				identical = false
			}
		}
	}
	t.Logf("%s and the compiled-in kernels give bit-identical vectors: %t", name, identical)
}

func toInt32(s []int) []int32 {
	out := make([]int32, len(s))
	for i, v := range s {
		out[i] = int32(v)
	}
	return out
}

// TestCPUVariantTheCPULacks: forcing a variant this CPU lacks an instruction set
// of stops serve (flag or environment) and the worker at start, with exit code 2
// and a message naming the instruction set: never a SIGILL in a request.
func TestCPUVariantTheCPULacks(t *testing.T) {
	bin, model := e2e.Paths(t)
	host := cpuvariant.ReadHost()
	var lacking *cpuvariant.Variant
	for _, v := range cpuvariant.ForArch(host.Arch) {
		if len(host.Missing(v)) > 0 {
			lacking = v
			break
		}
	}
	if lacking == nil {
		t.Skipf("this CPU runs every variant of %s", host.Arch)
	}
	miss := host.Missing(lacking)[0].Name
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		env  []string
	}{
		{"serve flag", []string{"serve", "--model", model, "--addr", e2e.FreeAddr(t), "--cpu-variant", lacking.Name}, nil},
		{"serve env", []string{"serve", "--model", model, "--addr", e2e.FreeAddr(t)}, []string{"EMBED_STACK_CPU_VARIANT=" + lacking.Name}},
		{"worker", []string{"worker", "--model", model, "--socket", filepath.Join(dir, "w.sock"), "--ignore-stdin", "--cpu-variant", lacking.Name}, nil},
		{"devices", []string{"devices", "--cpu-variant", lacking.Name}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = append(os.Environ(), tt.env...)
			p := e2e.Start(t, cmd)
			select {
			case <-p.Done():
			case <-time.After(time.Minute):
				t.Fatalf("still running:\n%s", p.Out)
			}
			out := p.Out.String()
			want := "--cpu-variant: CPU variant " + lacking.Name + " needs " + miss
			if code := e2e.ExitCode(p.Err()); code != 2 || !strings.Contains(out, want) || !strings.Contains(out, "which this CPU lacks") {
				t.Errorf("exit %d, want 2 and %q:\n%s", code, want, out)
			}
		})
	}
}

// TestCPUVariantFallback: a variant library that is missing or damaged leaves the
// worker on the compiled-in kernels, serving, with a warning in its log and in
// /health.
func TestCPUVariantFallback(t *testing.T) {
	name, good := testVariant(t)
	lib := cpuvariant.LibraryPrefix + name + ".so"
	missing := t.TempDir()
	damaged := t.TempDir()
	for _, d := range []string{missing, damaged} {
		entries, _ := os.ReadDir(good)
		for _, e := range entries {
			if e.Name() != lib {
				b, _ := os.ReadFile(filepath.Join(good, e.Name()))
				os.WriteFile(filepath.Join(d, e.Name()), b, 0o755)
			}
		}
	}
	// The first 4 KiB of the real library: an ELF header whose sections are gone.
	b, err := os.ReadFile(filepath.Join(good, lib))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged, lib), b[:4096], 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir, want string
	}{
		{missing, "CPU variant " + name + " was asked for (--cpu-variant), but " + lib + " is not in " + missing + "; running the compiled-in kernels"},
		{damaged, "CPU variant " + name + " did not load from " + filepath.Join(damaged, lib) + " ("},
	} {
		s := e2e.Serve(t, "--backend-dir", tt.dir, "--cpu-variant", name)
		d := healthDevice(t, s.URL)
		if d.CPUVariant != cpuvariant.Builtin || !strings.HasPrefix(d.Warning, tt.want) {
			t.Errorf("/health device cpu_variant %q warning %q, want builtin and %q", d.CPUVariant, d.Warning, tt.want)
		}
		if v := e2e.Embeddings(t, s.URL, map[string]any{"input": "still served"}); len(v) != 1 || len(v[0]) == 0 {
			t.Errorf("no vector: %v", v)
		}
		log := s.Out.String()
		if !strings.Contains(log, "level=WARN") || !strings.Contains(log, `msg="slower CPU kernels than this CPU allows"`) || !strings.Contains(log, tt.want) {
			t.Errorf("the log lacks the warning %q:\n%s", tt.want, log)
		}
		s.Stop()
	}
}

// TestDevicesNamesCPUVariant: `embed-stack devices` says which CPU kernels a
// worker would run: with --cpu-variant the library asked for; on auto the best
// library present unless the compiled-in kernels already use every instruction set
// it brings (a -march=native build).
func TestDevicesNamesCPUVariant(t *testing.T) {
	bin, _ := e2e.Paths(t)
	name, dir := testVariant(t)
	code, stdout, stderr := runBin(t, bin, "devices", "--backend-dir", dir, "--cpu-variant", name)
	if code != 0 || !strings.Contains(stdout, "cpu kernels: "+name+": ") {
		t.Errorf("devices --cpu-variant %s: exit %d\n%s%s", name, code, stdout, stderr)
	}
	code, stdout, stderr = runBin(t, bin, "devices", "--backend-dir", dir)
	auto := strings.Contains(stdout, "cpu kernels: "+name+": "+cpuvariant.Find(cpuvariant.ReadHost().Arch, name).Describe()) ||
		strings.Contains(stdout, "cpu kernels: builtin: compiled-in kernels (") && strings.Contains(stdout, "they use every instruction set of ")
	if code != 0 || !auto {
		t.Errorf("devices (auto): exit %d\n%s%s", code, stdout, stderr)
	}
}

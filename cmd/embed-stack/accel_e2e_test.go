package main

import (
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestServeCPUAccel serves the real all-MiniLM-L6-v2 with embed-stack's own CPU
// kernels (the default), with their AVX2 set forced where the CPU has AVX-512 too,
// and with --cpu-accel off, and checks that /health and `embed-stack devices` say
// which, and that the vectors of the reference texts and of long inputs (whose
// attention scores the kernels compute) agree: cosine >= 0.9999 to
// sentence-transformers' float64 forward pass for the texts, >= 0.99999 between
// the servers for every input. A value other than auto, off, avx512 or avx2 is
// refused at start, naming the flag.
func TestServeCPUAccel(t *testing.T) {
	if !(cpu.X86.HasAVX512F || cpu.X86.HasAVX2 && cpu.X86.HasFMA) {
		t.Skip("this CPU has neither AVX-512F nor AVX2 with FMA: embed-stack's kernels are not registered")
	}
	model := encoderModel(t, "models/minilm-f32.gguf")
	ref, want := readMiniLMReference(t)
	var long []string
	for _, n := range []int{8, 16, 32, 50} { // texts run together: about 70 to 480 tokens
		long = append(long, strings.Join(ref.Texts[:n], " "))
	}
	vectors := map[string][][]float64{}
	modes := map[string]string{"auto": "embed-stack kernels (AVX2)", "off": ""}
	if cpu.X86.HasAVX512F {
		modes["auto"] = "embed-stack kernels (AVX-512)"
		modes["avx2"] = "embed-stack kernels (AVX2)"
	}
	for mode, label := range modes {
		s := serveWith(t, "--model", "minilm="+model, "--weights", "file", "--threads", "2", "--cpu-accel", mode)
		if d := healthDevice(t, s.URL); d.CPUAccel != label {
			t.Errorf("--cpu-accel %s: /health device cpu_accel %q, want %q", mode, d.CPUAccel, label)
		}
		got := e2e.Embeddings(t, s.URL, map[string]any{"model": "minilm", "input": ref.Texts})
		for i := range got {
			if c := e2e.Cosine(got[i], want[i]); !(c >= 0.9999) {
				t.Errorf("--cpu-accel %s, text %d: cosine %.7f with the reference; want >= 0.9999", mode, i, c)
			}
		}
		vectors[mode] = append(got, e2e.Embeddings(t, s.URL, map[string]any{"model": "minilm", "input": long})...)
		s.Stop()
	}
	for mode := range modes {
		if mode == "off" {
			continue
		}
		lowest := 1.0
		for i := range vectors[mode] {
			lowest = min(lowest, e2e.Cosine(vectors[mode][i], vectors["off"][i]))
		}
		if !(lowest >= 0.99999) {
			t.Errorf("lowest cosine between --cpu-accel %s and off: %.8f; want >= 0.99999", mode, lowest)
		}
		t.Logf("--cpu-accel %s, %d inputs: lowest cosine %.8f to ggml's kernels", mode, len(vectors[mode]), lowest)
	}

	bin, _ := e2e.Paths(t)
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"devices", "--device", "cpu"}, 0, "cpu accel: embed-stack kernels ("},
		{[]string{"devices", "--device", "cpu", "--cpu-accel", "off"}, 0, "cpu accel: off (--cpu-accel off"},
		{[]string{"devices", "--cpu-accel", "fast"}, 2, `--cpu-accel: "fast" is not auto, off, avx512 or avx2`},
	} {
		code, stdout, stderr := runBin(t, bin, tc.args...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.out) {
			t.Errorf("embed-stack %s: exit %d, output\n%s%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.out)
		}
	}
}

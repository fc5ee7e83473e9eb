package main

import (
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestServeCPUAccel serves the real all-MiniLM-L6-v2 with embed-stack's own CPU
// kernels (the default) and with --cpu-accel off, and checks that /health and
// `embed-stack devices` say which, and that the vectors of the reference texts
// and of long inputs (whose attention scores the kernels compute) agree: cosine
// >= 0.9999 to sentence-transformers' float64 forward pass for the texts, >=
// 0.99999 between the two servers for every input. A value other than auto or
// off is refused at start, naming the flag.
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
	for _, mode := range []string{"auto", "off"} {
		s := serveWith(t, "--model", "minilm="+model, "--weights", "file", "--threads", "2", "--cpu-accel", mode)
		d := healthDevice(t, s.URL)
		if on := strings.HasPrefix(d.CPUAccel, "embed-stack kernels ("); on != (mode == "auto") {
			t.Errorf("--cpu-accel %s: /health device cpu_accel %q", mode, d.CPUAccel)
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
	lowest := 1.0
	for i := range vectors["auto"] {
		lowest = min(lowest, e2e.Cosine(vectors["auto"][i], vectors["off"][i]))
	}
	if !(lowest >= 0.99999) {
		t.Errorf("lowest cosine between --cpu-accel auto and off: %.8f; want >= 0.99999", lowest)
	}
	t.Logf("%d inputs: lowest cosine %.8f between embed-stack's kernels and ggml's", len(vectors["auto"]), lowest)

	bin, _ := e2e.Paths(t)
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"devices", "--device", "cpu"}, 0, "cpu accel: embed-stack kernels ("},
		{[]string{"devices", "--device", "cpu", "--cpu-accel", "off"}, 0, "cpu accel: off (--cpu-accel off"},
		{[]string{"devices", "--cpu-accel", "fast"}, 2, `--cpu-accel: "fast" is not auto or off`},
	} {
		code, stdout, stderr := runBin(t, bin, tc.args...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.out) {
			t.Errorf("embed-stack %s: exit %d, output\n%s%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.out)
		}
	}
}

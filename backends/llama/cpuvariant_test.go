package llama

import (
	"fmt"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

// TestMain runs every test of the package on the CPU kernels that
// EMBED_STACK_TEST_CPU_VARIANT names (a variant of the backend folder
// EMBED_STACK_TEST_BACKEND_DIR, e.g. lib/embed-stack after `make cpu-variants`),
// so that the reference and invariance tests hold a variant library to the same
// bars as the compiled-in kernels; unset, they run on the compiled-in ones. The
// kernels are chosen once per process, here, before any engine opens.
func TestMain(m *testing.M) {
	if v := testenv.Get("EMBED_STACK_TEST_CPU_VARIANT"); v != "" {
		if err := backendInit(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c, err := selectCPUVariant(v, testenv.Get("EMBED_STACK_TEST_BACKEND_DIR"))
		if err == nil && c.Warning != "" {
			err = fmt.Errorf("the variant did not load: %s", c.Warning)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "EMBED_STACK_TEST_CPU_VARIANT=%s: %v\n", v, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "CPU kernels: %s (%s)\n", c.Name(), c.Note)
	}
	os.Exit(m.Run())
}

// TestCPUVariantOncePerProcess: the kernels chosen first stay; auto takes them,
// another name is refused.
func TestCPUVariantOncePerProcess(t *testing.T) {
	if err := backendInit(); err != nil {
		t.Fatal(err)
	}
	first, err := selectCPUVariant("", "")
	if err != nil {
		t.Fatal(err)
	}
	again, err := selectCPUVariant("auto", t.TempDir())
	if err != nil || again.Name() != first.Name() {
		t.Fatalf("auto after %s: %s, %v", first.Name(), again.Name(), err)
	}
	asked := normChoice(cpuKernels.asked)
	other := "builtin"
	if asked == "builtin" {
		other = "haswell"
	}
	_, err = selectCPUVariant(other, "")
	want := fmt.Sprintf("CPU variant %q: this process already runs the CPU kernels chosen for %q (%s); the choice is made once per process", other, asked, first.Name())
	if err == nil || err.Error() != want {
		t.Fatalf("%s after %s: %v, want %s", other, asked, err, want)
	}
}

// TestFloatWeights: the AMX guard tells float layer matrices from quantized ones.
func TestFloatWeights(t *testing.T) {
	if !floatWeights(modelFile(t, tinyModel)) {
		t.Error("the tiny model's matrices are floats")
	}
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen3")
	data, err := gguf.AppendEncoded(nil, gguf.TypeQ8_0, make([]float32, 64))
	if err != nil {
		t.Fatal(err)
	}
	w.AddTensor("blk.0.attn_q.weight", gguf.TypeQ8_0, []uint64{32, 2}, func(out io.Writer) error {
		_, err := out.Write(data)
		return err
	})
	path := filepath.Join(t.TempDir(), "q8.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if floatWeights(path) {
		t.Error("Q8_0 matrices taken for floats")
	}
	if floatWeights(filepath.Join(t.TempDir(), "absent.gguf")) {
		t.Error("a missing file taken for floats")
	}
	// Without an AMX variant, the extra buffer types stay as ggml has them.
	if c := cpuKernels.choice.Variant; (c == nil || !c.Uses("amx_int8")) && !extraBuffers(path) {
		t.Error("extra buffers turned off without AMX")
	}
}

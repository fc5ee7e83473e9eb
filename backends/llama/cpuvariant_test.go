package llama

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs every test of the package on the CPU kernels that
// EMBED_STACK_TEST_CPU_VARIANT names (a variant of the backend folder
// EMBED_STACK_TEST_BACKEND_DIR, e.g. lib/embed-stack after `make cpu-variants`),
// so that the reference and invariance tests hold a variant library to the same
// bars as the compiled-in kernels; unset, they run on the compiled-in ones. The
// kernels are chosen once per process, here, before any engine opens.
func TestMain(m *testing.M) {
	if v := os.Getenv("EMBED_STACK_TEST_CPU_VARIANT"); v != "" {
		if err := backendInit(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c, err := selectCPUVariant(v, os.Getenv("EMBED_STACK_TEST_BACKEND_DIR"))
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

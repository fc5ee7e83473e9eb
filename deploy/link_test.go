package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// amxTarget is a CPU with AMX: `-march` for it defines __AMX_INT8__, the macro under
// which ggml-cpu.cpp calls into ggml's AMX sources.
const amxTarget = "sapphirerapids"

// cgoEnvFor runs `make -s cgo-env` with the given make variables and returns the
// environment it prints, as KEY=VALUE pairs.
func cgoEnvFor(t *testing.T, vars ...string) []string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-s", "cgo-env"}, vars...)...)
	cmd.Dir = testrepo.RootOf(t)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("make -s cgo-env %s: %v\n%s", strings.Join(vars, " "), err, errb.String())
	}
	var env []string
	for _, m := range regexp.MustCompile(`(?m)^export (\w+)='?([^'\n]*)'?$`).FindAllStringSubmatch(out.String(), -1) {
		env = append(env, m[1]+"="+m[2])
	}
	if len(env) < 4 {
		t.Fatalf("make -s cgo-env printed %d variables:\n%s", len(env), out.String())
	}
	return env
}

// TestCgoFlagsKeepAMXOff: on x86 the Makefile's cgo flags turn AMX off, whatever
// MARCH says. Without them a build on an AMX host (-march=native there) fails to link
// (issue 23: undefined ggml_backend_amx_buffer_type()). Cheap, and runs everywhere.
func TestCgoFlagsKeepAMXOff(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	goarch, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(goarch)) != "amd64" {
		t.Skipf("GOARCH %s: AMX is x86 only", goarch)
	}
	for _, march := range []string{"native", amxTarget, "x86-64-v3"} {
		env := strings.Join(cgoEnvFor(t, "MARCH="+march), "\n")
		for _, flag := range []string{"-march=" + march, "-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"} {
			for _, v := range []string{"CGO_CFLAGS", "CGO_CXXFLAGS"} {
				if !regexp.MustCompile(`(?m)^` + v + `=.*` + regexp.QuoteMeta(flag) + `( |$)`).MatchString(env) {
					t.Errorf("MARCH=%s: %s lacks %s:\n%s", march, v, flag, env)
				}
			}
		}
	}
}

// TestBuildLinksForAMXTarget compiles and links the binary and the Ollama benchmark
// peer for an AMX CPU with the Makefile's flags. It needs no AMX CPU: the failure it
// guards against is at link time. It compiles llama.cpp once more (at -O0, which
// defines the same macros as -O3 and takes a third of the time), so it runs when
// EMBED_STACK_REQUIRE_E2E=1 (make test) or EMBED_STACK_LINK_TEST=1, and is skipped in
// a plain `go test`.
func TestBuildLinksForAMXTarget(t *testing.T) {
	if !testenv.RequireE2E() && testenv.Get("EMBED_STACK_LINK_TEST") != "1" {
		t.Skip("compiles llama.cpp for " + amxTarget + ": set EMBED_STACK_LINK_TEST=1 (make test sets EMBED_STACK_REQUIRE_E2E=1)")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("no make on PATH")
	}
	goarch, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(goarch)) != "amd64" {
		t.Skipf("GOARCH %s: AMX is x86 only", goarch)
	}
	root := testrepo.RootOf(t)
	env := append(os.Environ(), cgoEnvFor(t, "MARCH="+amxTarget, "OPT=-O0")...)
	out := t.TempDir()
	for _, b := range []struct{ dir, pkg, bin string }{
		{root, "./cmd/embed-stack", "embed-stack"},
		{filepath.Join(root, "bench", "peers", "ollama"), ".", "ollama"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(out, b.bin), b.pkg)
		cmd.Dir = b.dir
		cmd.Env = env
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go build %s for -march=%s: %v\n%s", b.bin, amxTarget, err, tail(msg, 4000))
		}
	}
}

// tail is the last n bytes of b: a failed cgo build prints screens of warnings before
// the error.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

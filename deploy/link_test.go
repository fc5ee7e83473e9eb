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

// TestOwnCSourcesCompileEverywhere compiles backends/llama's own C sources (accel.c,
// whose kernels are x86 only and must compile away elsewhere) for arm64 with Debian's
// cross compiler, as the darwin/arm64 (Metal) and linux/arm64 builds compile them,
// and for the x86-64 baseline, as the portable build does (the kernels carry their
// own target attributes). The first BF16 kernel used an x86 mask type outside its
// guard: every x86 build compiled it, the arm64 one did not. Syntax only: no
// llama.cpp build, a second or two.
func TestOwnCSourcesCompileEverywhere(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	root := testrepo.RootOf(t)
	sources, err := filepath.Glob(filepath.Join(root, "backends", "llama", "*.c"))
	if err != nil || len(sources) == 0 {
		t.Fatalf("no C sources in backends/llama (%v)", err)
	}
	var includes []string
	for _, kv := range cgoEnvFor(t) {
		if v, ok := strings.CutPrefix(kv, "CGO_CPPFLAGS="); ok {
			includes = strings.Fields(v)
		}
	}
	if len(includes) == 0 {
		t.Fatal("make -s cgo-env printed no CGO_CPPFLAGS")
	}
	for _, target := range []struct{ cc, march string }{{"aarch64-linux-gnu-gcc", ""}, {"gcc", "-march=x86-64"}} {
		cc, err := exec.LookPath(target.cc)
		if err != nil {
			if testenv.RequireE2E() {
				t.Fatalf("%s is not installed (.ci/run installs g++-aarch64-linux-gnu)", target.cc)
			}
			t.Logf("%s is not installed: skipped", target.cc)
			continue
		}
		args := append([]string{"-std=gnu11", "-fsyntax-only", "-Wall"}, includes...)
		if target.march != "" {
			args = append(args, target.march)
		}
		for _, src := range sources {
			if out, err := exec.Command(cc, append(args, src)...).CombinedOutput(); err != nil {
				t.Errorf("%s %s: %v\n%s", target.cc, filepath.Base(src), err, tail(out, 4000))
			}
		}
	}
}

package deploy

import (
	"debug/elf"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// TestCPUVariantsCompile builds every CPU kernel variant of this architecture with
// `make cpu-variants` (cmake/cpu), at -O0: the AVX-512, AVX-512 BF16 and AMX ones
// (and on x86 hosts with aarch64-linux-gnu-g++, the arm64 dotprod and i8mm ones)
// compile and link on any host, though only a CPU that has their instructions can
// run them (the variant this CPU runs is built at -O3 by `make test` and loaded by
// cmd/embed-stack's end-to-end tests). Each library must be a ggml backend module
// (ggml_backend_init, ggml_backend_score) for the right machine, and the AMX one
// must hold ggml's AMX sources. A few minutes of compiling, so it runs when
// EMBED_STACK_REQUIRE_E2E=1 (make test) or EMBED_STACK_LINK_TEST=1.
func TestCPUVariantsCompile(t *testing.T) {
	if !testenv.RequireE2E() && testenv.Get("EMBED_STACK_LINK_TEST") != "1" {
		t.Skip("compiles every CPU variant: set EMBED_STACK_LINK_TEST=1 (make test sets EMBED_STACK_REQUIRE_E2E=1)")
	}
	for _, tool := range []string{"make", "cmake"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("no %s on PATH (make deps installs it)", tool)
		}
	}
	type build struct {
		arch, cross string
		machine     elf.Machine
	}
	builds := []build{{runtime.GOARCH, "", map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]}}
	if runtime.GOARCH == "amd64" {
		if _, err := exec.LookPath("aarch64-linux-gnu-g++"); err == nil {
			builds = append(builds, build{"arm64", "aarch64-linux-gnu", elf.EM_AARCH64})
		} else {
			t.Log("no aarch64-linux-gnu-g++ (g++-aarch64-linux-gnu): the arm64 variants are not compiled")
		}
	}
	root := testrepo.RootOf(t)
	for _, b := range builds {
		t.Run(b.arch, func(t *testing.T) {
			tmp := t.TempDir()
			lib := filepath.Join(tmp, "lib")
			args := []string{"-s", "cpu-variants", "BACKEND_DIR=" + lib, "CPU_BUILD_DIR=" + filepath.Join(tmp, "build"),
				"CPU_CMAKE_FLAGS=-DCMAKE_BUILD_TYPE=EmbedStackCheck", "CPU_JOBS=" + strconv.Itoa(runtime.NumCPU())}
			if b.cross != "" {
				args = append(args, "CPU_CROSS="+b.cross)
			}
			cmd := exec.Command("make", args...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "MAKEFLAGS=")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, tail(out, 4000))
			}
			for _, v := range cpuvariant.ForArch(b.arch) {
				path := filepath.Join(lib, v.Library())
				f, err := elf.Open(path)
				if err != nil {
					t.Errorf("%s: %v", v.Name, err)
					continue
				}
				syms, err := f.DynamicSymbols()
				f.Close()
				if err != nil {
					t.Errorf("%s: %v", v.Name, err)
					continue
				}
				if f.Machine != b.machine {
					t.Errorf("%s: built for %s, want %s", v.Name, f.Machine, b.machine)
				}
				defined := func(name string) bool {
					return slices.ContainsFunc(syms, func(s elf.Symbol) bool { return s.Name == name && s.Section != elf.SHN_UNDEF })
				}
				for _, want := range []string{"ggml_backend_init", "ggml_backend_score"} {
					if !defined(want) {
						t.Errorf("%s does not export %s", v.Library(), want)
					}
				}
				// ggml_backend_amx_buffer_type is what a -march=sapphirerapids
				// build of ggml-cpu.cpp calls (issue 23's link failure).
				if amx := slices.ContainsFunc(v.ISAs, func(i cpuvariant.ISA) bool { return slices.Contains(i.Flags, "amx_int8") }); amx != defined("_Z28ggml_backend_amx_buffer_typev") {
					t.Errorf("%s: ggml's AMX buffer type defined %t, want %t", v.Library(), !amx, amx)
				}
			}
			if _, err := os.Stat(filepath.Join(lib, "libggml-base.so")); err != nil {
				t.Errorf("no libggml-base.so beside the variants: %v", err)
			}
		})
	}
}

package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// makeCgoEnv runs `make -s cgo-env` in the repository root with the Go module cache
// replaced by an empty directory, as on a machine that has never built the project, and
// the given GOPROXY. It returns stdout, stderr and make's error.
func makeCgoEnv(t *testing.T, goproxy string) (stdout, stderr string, err error) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	modcache := t.TempDir()
	// The module cache is written read-only; make it removable for TempDir's cleanup.
	t.Cleanup(func() {
		filepath.WalkDir(modcache, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	cmd := exec.Command("make", "-s", "cgo-env")
	cmd.Dir = testrepo.RootOf(t)
	cmd.Env = append(os.Environ(), "GOMODCACHE="+modcache, "GOPROXY="+goproxy, "GOFLAGS=-mod=mod", "MAKEFLAGS=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// TestCgoEnvFromEmptyModuleCache is the fresh-machine build (issue 12): with nothing in
// the module cache, the include paths the Makefile hands to cgo must name directories
// that exist and hold llama.h and ggml.h. The Makefile used to resolve the module before
// downloading it and passed -I/llama/llama.cpp/include, so the first build on every new
// machine failed. The module comes from this machine's own cache, served as a file
// GOPROXY, so the test needs no network.
func TestCgoEnvFromEmptyModuleCache(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	dl := exec.Command(goBin, "mod", "download", "github.com/ollama/ollama")
	dl.Dir = testrepo.RootOf(t)
	if out, err := dl.CombinedOutput(); err != nil {
		t.Fatalf("go mod download github.com/ollama/ollama: %v\n%s", err, out)
	}
	out, err := exec.Command(goBin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	proxy := "file://" + filepath.Join(strings.TrimSpace(string(out)), "cache", "download")

	stdout, stderr, err := makeCgoEnv(t, proxy)
	if err != nil {
		t.Fatalf("make -s cgo-env with an empty module cache: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	m := regexp.MustCompile(`(?m)^export CGO_CPPFLAGS='([^']*)'$`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no CGO_CPPFLAGS line in:\n%s", stdout)
	}
	want := map[string]bool{"llama.h": false, "ggml.h": false}
	for _, f := range strings.Fields(m[1]) {
		dir, ok := strings.CutPrefix(f, "-I")
		if !ok {
			continue
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Errorf("include path %q is not a directory (%v)", dir, err)
			continue
		}
		for h := range want {
			if _, err := os.Stat(filepath.Join(dir, h)); err == nil {
				want[h] = true
			}
		}
	}
	for h, found := range want {
		if !found {
			t.Errorf("no include path holds %s: CGO_CPPFLAGS=%q", h, m[1])
		}
	}
}

// TestCgoEnvWithoutModuleFailsClearly: when the module cannot be downloaded, make stops
// with a message naming the command that must succeed, and prints no include path.
func TestCgoEnvWithoutModuleFailsClearly(t *testing.T) {
	stdout, stderr, err := makeCgoEnv(t, "off")
	if err == nil {
		t.Fatalf("make -s cgo-env succeeded with GOPROXY=off and an empty module cache:\n%s", stdout)
	}
	if strings.Contains(stdout, "-I") {
		t.Errorf("stdout holds include paths though the module is missing:\n%s", stdout)
	}
	for _, want := range []string{"cannot find llama.h", "go mod download github.com/ollama/ollama", "GOPROXY=off"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// maxGlibc is the newest glibc symbol version a release binary may need: 2.36 (Debian
// 12, Ubuntu 23.04, RHEL 10), as the archive's README promises. The binary itself needs
// 2.34; the static libstdc++ of GCC 12 calls arc4random (std::random_device), new in
// 2.36 (measured: this test said so with 2.34).
var maxGlibc = [2]int{2, 36}

// TestDistArchive checks the release archive `make dist` wrote (EMBED_STACK_DIST, set by
// `make test-dist`) as a user who has no toolchain meets it: its sha256 is the one in
// SHA256SUMS beside it; it unpacks into one folder named after it, root-owned, holding
// bin/embed-stack, lib/embed-stack/ and a README naming the version; the binary needs
// no libstdc++ and no glibc newer than 2.36, reports the archive's version, and serves
// the tiny model from where it was unpacked, on the best CPU kernel variant of the
// archive this CPU runs, with vectors equal (cosine ≥ 0.9999, the kernels are compiled
// for another -march) to those of the development build.
func TestDistArchive(t *testing.T) {
	archive := testenv.Get("EMBED_STACK_DIST")
	if archive == "" {
		t.Skip("EMBED_STACK_DIST is not set: `make test-dist` builds an archive and runs this test")
	}
	name := strings.TrimSuffix(filepath.Base(archive), ".tar.gz")
	m := regexp.MustCompile(`^embed-stack-(.+)-linux-(amd64|arm64)$`).FindStringSubmatch(name)
	if m == nil {
		t.Fatalf("archive name %q is not embed-stack-VERSION-linux-ARCH.tar.gz", name)
	}
	version := m[1]
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}

	sums, err := os.ReadFile(filepath.Join(filepath.Dir(archive), "SHA256SUMS"))
	if err != nil {
		t.Fatalf("no SHA256SUMS beside the archive: %v", err)
	}
	sum := sha256.Sum256(data)
	if want := hex.EncodeToString(sum[:]) + "  " + name + ".tar.gz\n"; !strings.Contains(string(sums), want) {
		t.Errorf("SHA256SUMS lacks the line %q:\n%s", want, sums)
	}

	dir := t.TempDir()
	files := untar(t, data, dir, name)
	for _, want := range []string{"bin/embed-stack", "lib/embed-stack/", "README.md"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the archive has no %s/%s; it has %v", name, want, keys(files))
		}
	}
	if mode := files["bin/embed-stack"]; mode&0o111 == 0 {
		t.Errorf("bin/embed-stack mode %v: not executable", mode)
	}
	root := filepath.Join(dir, name)
	readme, _ := os.ReadFile(filepath.Join(root, "README.md"))
	if !strings.Contains(string(readme), "# embed-stack "+version+" (linux-"+m[2]+")") || strings.Contains(string(readme), "@") && regexp.MustCompile(`@[A-Z]+@`).Match(readme) {
		t.Errorf("README.md does not name the version and platform, or kept a placeholder:\n%.400s", readme)
	}

	bin := filepath.Join(root, "bin", "embed-stack")
	checkELF(t, bin)
	if m[2] != goarch(t) {
		t.Skipf("a %s archive does not run on this %s host; its layout and ELF checked", m[2], goarch(t))
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("%s --version: %v\n%s\nwant it to name %s", bin, err, out, version)
	}

	// Served from the unpacked folder, beside the development build.
	_, model := e2e.Paths(t)
	dev := e2e.Serve(t)
	addr := e2e.FreeAddr(t)
	p := e2e.Start(t, exec.Command(bin, "serve", "--model", model, "--addr", addr, "--threads", "1"))
	p.WaitReady(t, "http://"+addr, e2e.ReadyTimeout)
	// The best CPU variant of the archive this CPU runs is the one in use: the
	// compiled-in baseline never covers it. When the CPU runs a better variant the
	// archive lacks (`make test-dist` packs only the tests' one, TEST_CPU_VARIANT,
	// which is this CPU's best unless it is given), the server must say so in
	// /health, naming the missing library and the one it runs.
	var best, hostBest string
	var wantWarning string
	host := cpuvariant.ReadHost()
	for _, v := range cpuvariant.Usable(host) {
		hostBest = v.Library()
		if _, ok := files["lib/embed-stack/"+v.Library()]; ok {
			best = v.Name
		}
	}
	if best != "" && hostBest != cpuvariant.Find(host.Arch, best).Library() {
		wantWarning = fmt.Sprintf("%s, the best CPU variant for this CPU, is not in %s; running %s instead (rebuild the folder with `make cpu-variants`)",
			hostBest, filepath.Join(root, "lib", "embed-stack"), best)
	}
	if best != "" {
		if _, ok := files["lib/embed-stack/libggml-base.so.0"]; !ok {
			t.Errorf("lib/embed-stack has CPU variants but no libggml-base.so.0, which they link")
		}
		var h struct {
			Device struct {
				CPUVariant string `json:"cpu_variant"`
				Warning    string `json:"warning"`
			} `json:"device"`
		}
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if err != nil || h.Device.CPUVariant != best || h.Device.Warning != wantWarning {
			t.Errorf("/health device: cpu_variant %q, warning %q (%v); want %s, the archive's best for this CPU, and warning %q", h.Device.CPUVariant, h.Device.Warning, err, best, wantWarning)
		}
	}
	body := map[string]any{"input": []string{"The quick brown fox", "jumps over the lazy dog"}, "dimensions": 64}
	got := e2e.Embeddings(t, "http://"+addr, body)
	want := e2e.Embeddings(t, dev.URL, body)
	for i := range want {
		if c := e2e.Cosine(got[i], want[i]); len(got[i]) != 64 || c < 0.9999 {
			t.Errorf("input %d: %d dimensions, cosine %.6f with the development build; want 64, ≥ 0.9999", i, len(got[i]), c)
		}
	}
}

// untar unpacks a gzipped tar into dir, requiring every entry under top/ and owned by
// root, and returns the paths below top/ (directories with a trailing slash) and modes.
func untar(t *testing.T, data []byte, dir, top string) map[string]os.FileMode {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]os.FileMode{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(h.Name, top+"/")
		if !ok && h.Name != top+"/" || strings.Contains(h.Name, "..") {
			t.Fatalf("entry %q is outside %s/", h.Name, top)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("entry %q owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, h.FileInfo().Mode().Perm())
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("entry %q: type %c, want only folders and plain files", h.Name, h.Typeflag)
		}
		if rel != "" {
			files[rel] = h.FileInfo().Mode()
		}
	}
	return files
}

// checkELF requires a binary that a stock glibc system runs: no libstdc++ or libgcc_s
// to install, and no glibc symbol newer than maxGlibc.
func checkELF(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if strings.HasPrefix(l, "libstdc++") || strings.HasPrefix(l, "libgcc_s") {
			t.Errorf("%s needs %s; the release links it statically", path, l)
		}
	}
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	newest, newestSym := [2]int{}, ""
	for _, s := range syms {
		v, ok := strings.CutPrefix(s.Version, "GLIBC_")
		if !ok {
			continue
		}
		parts := strings.SplitN(v, ".", 3)
		if len(parts) < 2 {
			continue
		}
		major, _ := strconv.Atoi(parts[0])
		minor, _ := strconv.Atoi(parts[1])
		if [2]int{major, minor} != newest && (major > newest[0] || major == newest[0] && minor > newest[1]) {
			newest, newestSym = [2]int{major, minor}, s.Name+"@"+s.Version
		}
	}
	if newest[0] > maxGlibc[0] || newest[0] == maxGlibc[0] && newest[1] > maxGlibc[1] {
		t.Errorf("%s needs %s, newer than glibc %d.%d", path, newestSym, maxGlibc[0], maxGlibc[1])
	}
}

func goarch(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func keys(m map[string]os.FileMode) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

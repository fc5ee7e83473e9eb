package llama

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCheckLibrary: a truncated shared library, which dlopen would load and the
// first access would kill with SIGBUS, is refused; so are a text file and a
// library for another architecture; a whole one passes.
func TestCheckLibrary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ELF only")
	}
	// libc is a shared library every Linux test machine has; find the one this
	// process mapped.
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	var libc string
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) == 6 && strings.Contains(filepath.Base(f[5]), "libc.so") {
			libc = f[5]
			break
		}
	}
	if libc == "" {
		t.Skip("no libc mapped (a static binary)")
	}
	if err := checkLibrary(libc); err != nil {
		t.Fatalf("%s: %v", libc, err)
	}
	b, err := os.ReadFile(libc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := append([]byte{}, b...)
	other[18], other[19] = 0x02, 0x00 // e_machine: EM_SPARC
	// Without a section header table (e_shoff, e_shnum, e_shstrndx zeroed), the
	// headers parse and only the segments tell that the file was cut short.
	noSections := append([]byte{}, b...)
	clear(noSections[0x28:0x30])
	clear(noSections[0x3c:0x40])
	for _, tt := range []struct {
		path, want string
	}{
		{write("truncated.so", b[:len(b)/2]), "a damaged ELF file, truncated or overwritten ("},
		{write("cut.so", noSections[:len(b)/2]), "truncated: a loadable segment ends at byte "},
		{write("text.so", []byte("not a library\n")), "not an ELF shared library (14 bytes)"},
		{write("other.so", other), "built for EM_SPARC, and this binary runs on "},
	} {
		err := checkLibrary(tt.path)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", filepath.Base(tt.path), err, tt.want)
		}
	}
}

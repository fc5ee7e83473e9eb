package llama

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"runtime"
)

// errNotELF is wrapped by checkLibrary's error for a file that is no ELF file at
// all: dlopen refuses such a file itself, cleanly.
var errNotELF = errors.New("not an ELF shared library")

// elfMachines are the ELF machines of the architectures the binary is built for.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkLibrary refuses, on Linux, a backend library that dlopen would map past
// its end or could not run here. The dynamic loader reads only the headers and
// then maps each loadable segment: a truncated library (a half-copied file, a
// full disk) loads, and the process dies of SIGBUS on its first access to a page
// that is not in the file, where it should have failed to load and fallen back.
// Elsewhere (Mach-O, PE) it checks nothing.
func checkLibrary(path string) error {
	if runtime.GOOS != "linux" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	magic := make([]byte, 4)
	if _, err := f.ReadAt(magic, 0); err != nil || string(magic) != elf.ELFMAG {
		return fmt.Errorf("%w (%d bytes)", errNotELF, st.Size())
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return fmt.Errorf("a damaged ELF file, truncated or overwritten (%d bytes): %w", st.Size(), err)
	}
	if ef.Type != elf.ET_DYN {
		return fmt.Errorf("an ELF file of type %s, not a shared library", ef.Type)
	}
	if want, ok := elfMachines[runtime.GOARCH]; ok && ef.Machine != want {
		return fmt.Errorf("built for %s, and this binary runs on %s", ef.Machine, want)
	}
	for _, p := range ef.Progs {
		if end := p.Off + p.Filesz; p.Type == elf.PT_LOAD && end > uint64(st.Size()) {
			return fmt.Errorf("truncated: a loadable segment ends at byte %d of a %d-byte file", end, st.Size())
		}
	}
	return nil
}

package cpuvariant

import (
	"os"
	"runtime"
	"strings"
)

// Host is what the choice knows of a CPU.
type Host struct {
	// Arch is the GOARCH of the binary that runs on it.
	Arch string
	// Model is the CPU's name ("AMD EPYC 9B45"), for messages; may be empty.
	Model string
	// Vendor is x86's "vendor_id" (VendorIntel, "AuthenticAMD"); empty elsewhere.
	// Kernels of one instruction set run at different rates on different
	// vendors' cores (package weights reads it: BF16 dot products).
	Vendor string
	// Family and ModelNumber are x86's "cpu family" and "model" ("26", "2"),
	// which tell CPU generations apart where the name does not; empty elsewhere.
	Family, ModelNumber string
	// Flags are the feature flags of the first processor of /proc/cpuinfo: its
	// "flags" line on x86, "Features" on arm64. The kernel lists only what it has
	// enabled (AVX-512 state saved by XSAVE, for instance).
	Flags map[string]bool
	// AMXDenied, when set, says why the kernel refused this process the AMX tile
	// registers (arch_prctl ARCH_REQ_XCOMP_PERM): AMX is then unusable even where
	// the flags list it.
	AMXDenied string
}

// ParseCPUInfo reads the text of /proc/cpuinfo for a binary of arch: the first
// processor's model name, family and model numbers, and feature flags.
func ParseCPUInfo(arch, text string) Host {
	h := Host{Arch: arch, Flags: map[string]bool{}}
	processors := 0
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			if processors++; processors > 1 {
				return h // the second processor's block: the first one is read
			}
		case "model name":
			h.Model = v
		case "vendor_id":
			h.Vendor = v
		case "cpu family":
			h.Family = v
		case "model":
			h.ModelNumber = v
		case "flags", "Features":
			for _, f := range strings.Fields(v) {
				h.Flags[f] = true
			}
		}
	}
	return h
}

// ReadHost describes the CPU this process runs on. Without /proc/cpuinfo (macOS)
// it has no flags, and so no variant is usable: the compiled-in kernels run. On
// Linux/amd64 with AMX it also asks the kernel for the AMX registers, as ggml's
// AMX code does before it uses them, and records a refusal in AMXDenied.
func ReadHost() Host {
	text, _ := os.ReadFile("/proc/cpuinfo")
	h := ParseCPUInfo(runtime.GOARCH, string(text))
	if h.Flags["amx_tile"] {
		if err := requestAMX(); err != nil {
			h.AMXDenied = err.Error()
		}
	}
	return h
}

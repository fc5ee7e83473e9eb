package bench

// The host a run is measured on, for the report: its CPU, the SIMD flags that
// decide which kernels run, and the load average beside every figure.

import (
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
)

// loadAvg reads the 1-, 5- and 15-minute load averages (zeros where /proc is
// missing).
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}

func readHost() Host {
	h := Host{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		h.CPU, h.CPUID, h.SIMD = parseCPUInfo(string(b))
	}
	return h
}

// simdFlags are the /proc/cpuinfo flags that decide which of ggml's x86 kernels
// run (llamafile's tinyBLAS for F16, BF16 and Q8_0, and ggml's own dot products),
// in the order they are reported.
var simdFlags = []string{"avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"}

// parseCPUInfo reads the first processor's name, x86 family and model, and those
// of simdFlags it has, from the text of /proc/cpuinfo.
func parseCPUInfo(text string) (name, id string, simd []string) {
	h := cpuvariant.ParseCPUInfo(runtime.GOARCH, text)
	for _, f := range simdFlags {
		if h.Flags[f] {
			simd = append(simd, f)
		}
	}
	if h.Family != "" && h.ModelNumber != "" {
		id = "family " + h.Family + " model " + h.ModelNumber
	}
	return h.Model, id, simd
}

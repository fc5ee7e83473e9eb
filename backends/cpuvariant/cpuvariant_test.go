package cpuvariant

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// hosts are the recorded /proc/cpuinfo files of testdata/ (README.md there says
// where each comes from), with the variant auto must pick for each when every
// library is present and the compiled-in kernels are a portable baseline.
var hosts = []struct {
	file, arch, best string
}{
	{"zen3-avx2.cpuinfo", "amd64", "haswell"},
	{"zen5-avx512.cpuinfo", "amd64", "zen4"},
	{"emeraldrapids-noamx.cpuinfo", "amd64", "zen4"},
	{"sapphirerapids-amx.cpuinfo", "amd64", "sapphirerapids"},
	{"skylakex-avx512.cpuinfo", "amd64", "skylakex"},
	{"sandybridge-avx.cpuinfo", "amd64", "sandybridge"},
	{"cortexa72-armv8.cpuinfo", "arm64", Builtin},
	{"neoversen1-dotprod.cpuinfo", "arm64", "armv8.2_2"},
	{"neoversev1-i8mm.cpuinfo", "arm64", "armv8.6_1"},
}

func readHost(t *testing.T, file, arch string) Host {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return ParseCPUInfo(arch, string(b))
}

func allNames(arch string) []string { return names(ForArch(arch)) }

// Builtin feature sets as ggml_backend_get_features reports them for the
// compiled-in kernels of a build: x86-64-v2 (the portable baseline) and
// -march=native on Zen 3.
var (
	builtinV2   = []string{"SSE3", "SSSE3", "LLAMAFILE"}
	builtinZen3 = []string{"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE"}
	builtinArm  = []string{"NEON", "ARM_FMA", "LLAMAFILE"}
)

func TestAutoPicksTheBestForEachRecordedHost(t *testing.T) {
	for _, h := range hosts {
		t.Run(h.file, func(t *testing.T) {
			host := readHost(t, h.file, h.arch)
			builtin := builtinV2
			if h.arch == "arm64" {
				builtin = builtinArm
			}
			c, err := Choose(Request{Host: host, Present: allNames(h.arch), Builtin: builtin, Dir: "lib/embed-stack"})
			if err != nil {
				t.Fatal(err)
			}
			if c.Name() != h.best || c.Warning != "" {
				t.Fatalf("auto chose %q (note %q, warning %q), want %q without warning", c.Name(), c.Note, c.Warning, h.best)
			}
			// Usable's last is what `make test` builds (tools/cpuvariant-best):
			// the same variant, none where the CPU runs none.
			best := Builtin
			if u := Usable(host); len(u) > 0 {
				best = u[len(u)-1].Name
				for _, v := range u {
					if m := host.Missing(v); len(m) > 0 {
						t.Errorf("Usable gives %s, which lacks %v", v.Name, m)
					}
				}
			}
			if best != h.best {
				t.Errorf("Usable's best %q, want %q", best, h.best)
			}
		})
	}
}

// TestNeverUnsupported: whatever the libraries present and whatever the
// compiled-in kernels, auto never gives a CPU a variant it lacks an instruction
// set of, and takes the best usable one present that the compiled-in kernels do
// not already match.
func TestNeverUnsupported(t *testing.T) {
	for _, h := range hosts {
		host := readHost(t, h.file, h.arch)
		all := ForArch(h.arch)
		for _, builtin := range [][]string{nil, builtinV2, builtinZen3, builtinArm} {
			for mask := range 1 << len(all) {
				var present []string
				for i, v := range all {
					if mask&(1<<i) != 0 {
						present = append(present, v.Name)
					}
				}
				c, err := Choose(Request{Host: host, Present: present, Builtin: builtin})
				if err != nil {
					t.Fatalf("%s %v: %v", h.file, present, err)
				}
				var want *Variant
				for _, v := range all {
					if len(host.Missing(v)) == 0 && slices.Contains(present, v.Name) && !coveredBy(v, builtin) {
						want = v
					}
				}
				if c.Variant != want {
					t.Fatalf("%s, present %v, builtin %v: chose %s, want %v", h.file, present, builtin, c.Name(), want)
				}
				if c.Variant != nil {
					for _, isa := range c.Variant.ISAs {
						for _, f := range isa.Flags {
							if !host.Flags[f] {
								t.Fatalf("%s: %s given without %s", h.file, c.Variant.Name, f)
							}
						}
					}
				}
			}
		}
	}
}

func TestAMXRefusedByTheKernel(t *testing.T) {
	host := readHost(t, "sapphirerapids-amx.cpuinfo", "amd64")
	host.AMXDenied = "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): invalid argument"
	c, err := Choose(Request{Host: host, Present: allNames("amd64"), Builtin: builtinV2})
	if err != nil || c.Name() != "zen4" {
		t.Fatalf("auto with AMX refused: %s, %v; want zen4 (AVX-512 BF16 without AMX)", c.Name(), err)
	}
	_, err = Choose(Request{Host: host, Choice: "sapphirerapids", Present: allNames("amd64")})
	want := "CPU variant sapphirerapids needs AMX-TILE/INT8/BF16, which the kernel refused to enable (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): invalid argument), which this CPU lacks (not among the flags of /proc/cpuinfo); it would die with SIGILL. This CPU can run: sandybridge, haswell, alderlake, skylakex, cascadelake, icelake, zen4, builtin or auto"
	if err == nil || err.Error() != want {
		t.Fatalf("forced sapphirerapids with AMX refused:\n got %v\nwant %s", err, want)
	}
}

func TestForcedVariantTheCPULacks(t *testing.T) {
	host := readHost(t, "zen3-avx2.cpuinfo", "amd64")
	_, err := Choose(Request{Host: host, Choice: "skylakex", Present: allNames("amd64")})
	want := "CPU variant skylakex needs AVX-512 F/CD/VL/DQ/BW (avx512f avx512cd avx512vl avx512dq avx512bw), which this CPU lacks (not among the flags of /proc/cpuinfo); it would die with SIGILL. This CPU can run: sandybridge, haswell, builtin or auto"
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	_, err = Choose(Request{Host: host, Choice: "sapphirerapids"})
	if err == nil || !strings.Contains(err.Error(), "needs AVX-512 F/CD/VL/DQ/BW (avx512f avx512cd avx512vl avx512dq avx512bw) and AVX-512 VBMI (avx512vbmi) and AVX-512 VNNI (avx512_vnni) and AVX-512 BF16 (avx512_bf16) and AMX-TILE/INT8/BF16 (amx_tile amx_int8 amx_bf16), which") {
		t.Fatalf("sapphirerapids on Zen 3: %v", err)
	}
	old := readHost(t, "sandybridge-avx.cpuinfo", "amd64")
	_, err = Choose(Request{Host: old, Choice: "haswell"})
	if err == nil || !strings.HasPrefix(err.Error(), "CPU variant haswell needs AVX2+FMA+F16C+BMI2 (avx2 fma f16c bmi2), which this CPU lacks") {
		t.Fatalf("haswell on Sandy Bridge: %v", err)
	}
	arm := readHost(t, "cortexa72-armv8.cpuinfo", "arm64")
	_, err = Choose(Request{Host: arm, Choice: "armv8.2_1"})
	if err == nil || !strings.HasPrefix(err.Error(), "CPU variant armv8.2_1 needs dotprod (asimddp), which this CPU lacks") || !strings.HasSuffix(err.Error(), "This CPU can run: builtin or auto") {
		t.Fatalf("dotprod on a Cortex-A72: %v", err)
	}
}

func TestForcedVariant(t *testing.T) {
	host := readHost(t, "zen5-avx512.cpuinfo", "amd64")
	c, err := Choose(Request{Host: host, Choice: " Haswell ", Present: allNames("amd64"), Builtin: builtinV2})
	if err != nil || c.Name() != "haswell" || c.Warning != "" || c.Note != "haswell (AVX, AVX2+FMA+F16C+BMI2), as asked (--cpu-variant)" {
		t.Fatalf("forced haswell on Zen 5: %+v, %v", c, err)
	}
	// Forcing a variant the compiled-in kernels cover still loads it: the operator
	// asked for that library.
	c, err = Choose(Request{Host: readHost(t, "zen3-avx2.cpuinfo", "amd64"), Choice: "haswell", Present: []string{"haswell"}, Builtin: builtinZen3})
	if err != nil || c.Name() != "haswell" {
		t.Fatalf("forced haswell over a native build: %+v, %v", c, err)
	}
	c, err = Choose(Request{Host: host, Choice: "builtin", Present: allNames("amd64"), Builtin: builtinV2})
	if err != nil || c.Variant != nil || c.Warning != "" || c.Note != "compiled-in kernels (SSE3 SSSE3), as asked (--cpu-variant builtin)" {
		t.Fatalf("forced builtin: %+v, %v", c, err)
	}
	// The library is missing: the compiled-in kernels, with a warning.
	c, err = Choose(Request{Host: host, Choice: "zen4", Present: []string{"haswell"}, Builtin: builtinV2, Dir: "lib/embed-stack"})
	want := "CPU variant zen4 was asked for (--cpu-variant), but libggml-cpu-zen4.so is not in lib/embed-stack; running the compiled-in kernels (SSE3 SSSE3) instead (build it with `make cpu-variants`)"
	if err != nil || c.Variant != nil || c.Warning != want {
		t.Fatalf("forced zen4, missing:\n got %+v, %v\nwant warning %s", c, err, want)
	}
}

func TestUnknownVariant(t *testing.T) {
	host := readHost(t, "zen3-avx2.cpuinfo", "amd64")
	for _, s := range []string{"avx2", "armv8.2_1", "native"} {
		_, err := Choose(Request{Host: host, Choice: s})
		want := `unknown CPU variant "` + s + `": choose auto, builtin or one of sandybridge, haswell, alderlake, skylakex, cascadelake, icelake, zen4, sapphirerapids (the variants of amd64)`
		if !errors.Is(err, ErrUnknown) || err.Error() != want {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestAutoFallbacks(t *testing.T) {
	zen5 := readHost(t, "zen5-avx512.cpuinfo", "amd64")
	// The best one is missing, a lesser one is there: that one, with a warning.
	c, _ := Choose(Request{Host: zen5, Present: []string{"haswell", "skylakex"}, Builtin: builtinV2, Dir: "d"})
	if c.Name() != "skylakex" || c.Warning != "libggml-cpu-zen4.so, the best CPU variant for this CPU, is not in d; running skylakex instead (rebuild the folder with `make cpu-variants`)" {
		t.Fatalf("%+v", c)
	}
	// Only variants this CPU cannot run: the compiled-in kernels, with a warning.
	zen3 := readHost(t, "zen3-avx2.cpuinfo", "amd64")
	c, _ = Choose(Request{Host: zen3, Present: []string{"zen4", "sapphirerapids"}, Builtin: builtinV2, Dir: "d"})
	if c.Variant != nil || c.Warning != "libggml-cpu-haswell.so, the best CPU variant for this CPU, is not in d; running the compiled-in kernels (SSE3 SSSE3) instead, which can be several times slower (rebuild the folder with `make cpu-variants`)" {
		t.Fatalf("%+v", c)
	}
	// No variant at all in a build that does not rely on them: a note, no warning.
	c, _ = Choose(Request{Host: zen3, Builtin: builtinZen3, Dir: "d"})
	if c.Variant != nil || c.Warning != "" || c.Note != "compiled-in kernels (SSE3 SSSE3 AVX AVX2 F16C FMA BMI2): they use every instruction set of haswell, this CPU's best variant" {
		t.Fatalf("%+v", c)
	}
	c, _ = Choose(Request{Host: zen3, Builtin: builtinV2, Dir: "d"})
	if c.Variant != nil || c.Warning != "" || c.Note != "compiled-in kernels (SSE3 SSSE3): no CPU variant libraries in d (`make cpu-variants` builds them)" {
		t.Fatalf("%+v", c)
	}
	// ... and in one that does (a portable build): a warning.
	c, _ = Choose(Request{Host: zen3, Builtin: builtinV2, Dir: "d", Expected: true})
	if c.Variant != nil || !strings.HasPrefix(c.Warning, "libggml-cpu-haswell.so, the best CPU variant for this CPU, is not in d;") {
		t.Fatalf("%+v", c)
	}
	// A native build on Zen 5 still loads zen4 for AVX-512, when it is there.
	c, _ = Choose(Request{Host: zen5, Present: allNames("amd64"), Builtin: builtinZen3})
	if c.Name() != "zen4" {
		t.Fatalf("%+v", c)
	}
	// No flags (macOS, no /proc): the compiled-in kernels.
	c, _ = Choose(Request{Host: Host{Arch: "arm64"}, Present: allNames("arm64")})
	if c.Variant != nil || c.Warning != "" || c.Note != "compiled-in kernels: no CPU variant for this CPU" {
		t.Fatalf("%+v", c)
	}
}

func TestDamagedWarning(t *testing.T) {
	c := DamagedWarning(Find("amd64", "haswell"), "d/libggml-cpu-haswell.so", "d/libggml-cpu-haswell.so: invalid ELF header", builtinV2)
	want := "CPU variant haswell did not load from d/libggml-cpu-haswell.so (d/libggml-cpu-haswell.so: invalid ELF header); running the compiled-in kernels (SSE3 SSSE3) instead (rebuild it with `make cpu-variants`, or remove it)"
	if c.Variant != nil || c.Warning != want {
		t.Fatalf("got %q", c.Warning)
	}
}

func TestParseCPUInfo(t *testing.T) {
	h := readHost(t, "zen3-avx2.cpuinfo", "amd64")
	if h.Model != "AMD EPYC" || h.Vendor != "AuthenticAMD" || !h.Flags["avx2"] || h.Flags["avx512f"] || len(h.Flags) < 50 {
		t.Fatalf("zen3: %q of %q, %d flags", h.Model, h.Vendor, len(h.Flags))
	}
	h = readHost(t, "emeraldrapids-noamx.cpuinfo", "amd64")
	if h.Vendor != VendorIntel || h.Family != "6" || h.ModelNumber != "207" || !h.Flags["avx512_bf16"] || h.Flags["amx_tile"] {
		t.Fatalf("emerald rapids: %+v", h)
	}
	c, err := Choose(Request{Host: h, Present: []string{"zen4"}, Builtin: builtinV2})
	if err != nil || c.Name() != "zen4" || c.Vendor != VendorIntel {
		t.Fatalf("emerald rapids: %+v, %v; want zen4 with the host's vendor", c, err)
	}
	h = ParseCPUInfo("amd64", "processor\t: 0\nmodel name\t: A\nflags\t\t: avx2\n\nprocessor\t: 1\nmodel name\t: B\nflags\t\t: avx512f\n")
	if h.Model != "A" || !h.Flags["avx2"] || h.Flags["avx512f"] {
		t.Fatalf("second processor read: %+v", h)
	}
	h = readHost(t, "neoversev1-i8mm.cpuinfo", "arm64")
	if !h.Flags["i8mm"] || !h.Flags["asimddp"] || h.Model != "" || h.Vendor != "" {
		t.Fatalf("arm64: %+v", h)
	}
}

// ggmlFlags are the /proc/cpuinfo flags each ggml feature's compiler flags need
// (ggml-cpu/CMakeLists.txt: -mavx512f -mavx512cd ... for AVX512, +dotprod for
// DOTPROD, ...).
var ggmlFlags = map[string][]string{
	"SSE42": {"sse4_2"}, "AVX": {"avx"}, "F16C": {"f16c"}, "AVX2": {"avx2"}, "BMI2": {"bmi2"}, "FMA": {"fma"},
	"AVX_VNNI": {"avx_vnni"}, "AVX512": {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"},
	"AVX512_VBMI": {"avx512vbmi"}, "AVX512_VNNI": {"avx512_vnni"}, "AVX512_BF16": {"avx512_bf16"},
	"AMX_TILE": {"amx_tile"}, "AMX_INT8": {"amx_int8"}, "AMX_BF16": {"amx_bf16"},
	"DOTPROD": {"asimddp"}, "FP16_VECTOR_ARITHMETIC": {"asimdhp"}, "SVE": {"sve"}, "MATMUL_INT8": {"i8mm"},
}

// TestISAsMatchTheBuild: the flags a variant requires of the CPU are exactly those
// of the instruction sets it is compiled with: one more compiler flag without a
// required CPU flag would let a CPU without it load the library.
func TestISAsMatchTheBuild(t *testing.T) {
	for _, v := range Variants {
		var need, built []string
		for _, isa := range v.ISAs {
			need = append(need, isa.Flags...)
		}
		for _, f := range v.GGML {
			fl, ok := ggmlFlags[f]
			if !ok {
				t.Fatalf("%s: ggml feature %s has no CPU flags here", v.Name, f)
			}
			built = append(built, fl...)
		}
		slices.Sort(need)
		slices.Sort(built)
		if !slices.Equal(need, built) {
			t.Errorf("%s: requires flags %v, built for %v", v.Name, need, built)
		}
	}
}

// TestTableMatchesCMake: cmake/cpu/variants.cmake builds exactly the variants of
// the table, with the same ggml features, in the same order.
func TestTableMatchesCMake(t *testing.T) {
	b, err := os.ReadFile("../../cmake/cpu/variants.cmake")
	if err != nil {
		t.Fatal(err)
	}
	arch := ""
	var got []Variant
	re := regexp.MustCompile(`^\s*embed_stack_cpu_variant\((\S+)\s+([^)]*)\)`)
	for line := range strings.Lines(string(b)) {
		switch {
		case strings.Contains(line, `GGML_SYSTEM_ARCH STREQUAL "x86"`):
			arch = "amd64"
		case strings.Contains(line, `GGML_SYSTEM_ARCH STREQUAL "ARM"`):
			arch = "arm64"
		}
		if m := re.FindStringSubmatch(line); m != nil {
			got = append(got, Variant{Name: m[1], Arch: arch, GGML: strings.Fields(m[2])})
		}
	}
	if len(got) != len(Variants) {
		t.Fatalf("variants.cmake has %d variants, the table %d", len(got), len(Variants))
	}
	for i, g := range got {
		v := Variants[i]
		if g.Name != v.Name || g.Arch != v.Arch || !slices.Equal(g.GGML, v.GGML) {
			t.Errorf("variant %d: cmake %s/%s %v, table %s/%s %v", i, g.Arch, g.Name, g.GGML, v.Arch, v.Name, v.GGML)
		}
	}
}

func TestReadHost(t *testing.T) {
	if _, err := os.Stat("/proc/cpuinfo"); err != nil {
		t.Skip("no /proc/cpuinfo")
	}
	h := ReadHost()
	if h.Arch != runtime.GOARCH || len(h.Flags) == 0 {
		t.Fatalf("host %s with %d flags read from /proc/cpuinfo", h.Arch, len(h.Flags))
	}
	// AMX permission is asked for only where the flags list AMX.
	if !h.Flags["amx_tile"] && h.AMXDenied != "" {
		t.Fatalf("AMX refused on a CPU without AMX: %s", h.AMXDenied)
	}
}

func TestUses(t *testing.T) {
	spr, zen4 := Find("amd64", "sapphirerapids"), Find("amd64", "zen4")
	if !spr.Uses("amx_int8") || zen4.Uses("amx_int8") || !zen4.Uses("avx512_bf16") || Find("amd64", "haswell").Uses("avx512f") {
		t.Error("Uses does not follow the variants' instruction sets")
	}
}

// TestChoiceFeatures: a choice carries the ggml features of the kernels it runs,
// as ggml_backend_get_features reports them: the variant's (AVX-512 BF16 for zen4
// and sapphirerapids, which package weights converts F16 weights for), or the
// compiled-in kernels' when it runs those.
func TestChoiceFeatures(t *testing.T) {
	for _, h := range hosts {
		if h.arch != "amd64" {
			continue
		}
		host := readHost(t, h.file, h.arch)
		c, err := Choose(Request{Host: host, Present: allNames(h.arch), Builtin: builtinV2, Dir: "lib/embed-stack"})
		if err != nil {
			t.Fatal(err)
		}
		bf16 := h.best == "zen4" || h.best == "sapphirerapids"
		if got := slices.Contains(c.Features, BF16); got != bf16 || !slices.Contains(c.Features, "AVX") {
			t.Errorf("%s: auto runs %s with features %v; AVX512_BF16 among them: %t, want %t", h.file, c.Name(), c.Features, got, bf16)
		}
	}
	zen4 := Find("amd64", "zen4")
	want := []string{"AVX", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"}
	if got := kernelFeatures(zen4, builtinV2); !slices.Equal(got, want) {
		t.Errorf("zen4's features %v, want %v", got, want)
	}
	c, err := Choose(Request{Host: readHost(t, "zen5-avx512.cpuinfo", "amd64"), Choice: Builtin, Builtin: builtinZen3})
	if err != nil || !slices.Equal(c.Features, builtinZen3) {
		t.Errorf("builtin: %v, %v; want the compiled-in kernels' %v", c.Features, err, builtinZen3)
	}
	if d := DamagedWarning(zen4, "x.so", "bad", builtinV2); !slices.Equal(d.Features, builtinV2) {
		t.Errorf("a damaged library runs the compiled-in kernels, features %v", d.Features)
	}
}

// Package cpuvariant chooses which build of ggml's CPU kernels a worker runs: the
// kernels compiled into the binary, or one of the variant libraries,
// libggml-cpu-NAME.so, that `make cpu-variants` writes into the backend folder
// (lib/embed-stack/, beside the GPU backends), each compiled for one class of CPU:
// AVX2, AVX-512, AVX-512 with VNNI and BF16, AMX, arm64 dotprod and i8mm.
//
// The choice is a pure function (Choose) of the CPU's feature flags as the kernel
// lists them in /proc/cpuinfo (which is what the OS lets programs use), the
// libraries present, and the operator's override, so that it is tested against
// recorded flag sets, and serve, which never loads ggml, can refuse a forced
// variant before any worker starts. A variant is never given to a CPU that lacks
// one of its instruction sets: ggml's own check in each library
// (ggml_backend_score, CPUID only, without asking whether the OS enabled the
// registers) is a second gate, not the only one.
//
// It knows nothing of cgo or ggml's API: loading a library is backends/llama's job.
package cpuvariant

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// An ISA is an instruction-set extension that a variant's kernels use, named as
// people say it, with the /proc/cpuinfo flags that show the CPU (and the OS) has it.
type ISA struct {
	Name  string
	Flags []string
}

// The ISAs of the variants. AVX2 is named with FMA, F16C and BMI2 because ggml
// builds its AVX2 kernels with all four (x86-64-v3 has them together).
var (
	isaSSE42   = ISA{"SSE4.2", []string{"sse4_2"}}
	isaAVX     = ISA{"AVX", []string{"avx"}}
	isaAVX2    = ISA{"AVX2+FMA+F16C+BMI2", []string{"avx2", "fma", "f16c", "bmi2"}}
	isaAVXVNNI = ISA{"AVX-VNNI", []string{"avx_vnni"}}
	isaAVX512  = ISA{"AVX-512 F/CD/VL/DQ/BW", []string{"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}}
	isaVNNI    = ISA{"AVX-512 VNNI", []string{"avx512_vnni"}}
	isaVBMI    = ISA{"AVX-512 VBMI", []string{"avx512vbmi"}}
	isaBF16    = ISA{"AVX-512 BF16", []string{"avx512_bf16"}}
	isaAMX     = ISA{"AMX-TILE/INT8/BF16", []string{"amx_tile", "amx_int8", "amx_bf16"}}
	isaDotprod = ISA{"dotprod", []string{"asimddp"}}
	isaFP16    = ISA{"FP16 vector arithmetic", []string{"asimdhp"}}
	isaSVE     = ISA{"SVE", []string{"sve"}}
	isaI8MM    = ISA{"i8mm", []string{"i8mm"}}
)

// A Variant is one build of ggml's CPU kernels, libggml-cpu-NAME.so.
type Variant struct {
	// Name is ggml's tag: the library is libggml-cpu-NAME.so, and --cpu-variant
	// takes the name.
	Name string
	// Arch is the GOARCH the library is built for.
	Arch string
	// ISAs are the instruction sets its kernels use, each of which the CPU must have.
	ISAs []ISA
	// GGML are the ggml features it is built with (cmake/cpu/variants.cmake
	// passes them to ggml_add_cpu_backend_variant: GGML_<FEATURE>=ON).
	GGML []string
}

// Library is the variant's file name in the backend folder.
func (v *Variant) Library() string { return LibraryPrefix + v.Name + ".so" }

// LibraryPrefix begins the file name of every CPU variant library.
const LibraryPrefix = "libggml-cpu-"

// Uses says whether the variant's kernels need the CPU flag (a /proc/cpuinfo
// name: "amx_int8", "avx512_bf16", ...).
func (v *Variant) Uses(flag string) bool {
	return slices.ContainsFunc(v.ISAs, func(i ISA) bool { return slices.Contains(i.Flags, flag) })
}

// Describe is the variant with its instruction sets: "haswell (AVX,
// AVX2+FMA+F16C+BMI2)".
func (v *Variant) Describe() string {
	names := make([]string, 0, len(v.ISAs))
	for _, isa := range v.ISAs {
		if isa.Name != isaSSE42.Name {
			names = append(names, isa.Name)
		}
	}
	return v.Name + " (" + strings.Join(names, ", ") + ")"
}

// Variants are those `make cpu-variants` builds, per architecture in ascending order
// of preference: of those a CPU can run, the last is the best. The list and its
// features mirror cmake/cpu/variants.cmake (TestTableMatchesCMake).
var Variants = []Variant{
	{"sandybridge", "amd64", []ISA{isaSSE42, isaAVX}, []string{"SSE42", "AVX"}},
	{"haswell", "amd64", []ISA{isaSSE42, isaAVX, isaAVX2}, []string{"SSE42", "AVX", "F16C", "AVX2", "BMI2", "FMA"}},
	{"alderlake", "amd64", []ISA{isaSSE42, isaAVX, isaAVX2, isaAVXVNNI}, []string{"SSE42", "AVX", "F16C", "AVX2", "BMI2", "FMA", "AVX_VNNI"}},
	{"skylakex", "amd64", []ISA{isaSSE42, isaAVX, isaAVX2, isaAVX512}, []string{"SSE42", "AVX", "F16C", "AVX2", "BMI2", "FMA", "AVX512"}},
	{"cascadelake", "amd64", []ISA{isaSSE42, isaAVX, isaAVX2, isaAVX512, isaVNNI}, []string{"SSE42", "AVX", "F16C", "AVX2", "BMI2", "FMA", "AVX512", "AVX512_VNNI"}},
	{"icelake", "amd64", []ISA{isaSSE42, isaAVX, isaAVX2, isaAVX512, isaVBMI, isaVNNI}, []string{"SSE42", "AVX", "F16C", "AVX2", "BMI2", "FMA", "AVX512", "AVX512_VBMI", "AVX512_VNNI"}},
	{"zen4", "amd64", []ISA{isaSSE42, isaAVX, isaAVX2, isaAVX512, isaVBMI, isaVNNI, isaBF16}, []string{"SSE42", "AVX", "F16C", "AVX2", "BMI2", "FMA", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"}},
	{"sapphirerapids", "amd64", []ISA{isaSSE42, isaAVX, isaAVX2, isaAVX512, isaVBMI, isaVNNI, isaBF16, isaAMX}, []string{"SSE42", "AVX", "F16C", "AVX2", "BMI2", "FMA", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16"}},
	{"armv8.2_1", "arm64", []ISA{isaDotprod}, []string{"DOTPROD"}},
	{"armv8.2_2", "arm64", []ISA{isaDotprod, isaFP16}, []string{"DOTPROD", "FP16_VECTOR_ARITHMETIC"}},
	{"armv8.6_1", "arm64", []ISA{isaDotprod, isaFP16, isaSVE, isaI8MM}, []string{"DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8"}},
}

// Names of the --cpu-variant choices besides the variants themselves.
const (
	Auto    = "auto"    // the best variant for the CPU among those present (default)
	Builtin = "builtin" // the kernels compiled into the binary; loads no library
)

// Find returns the variant of arch named name, or nil.
func Find(arch, name string) *Variant {
	for i := range Variants {
		if Variants[i].Arch == arch && Variants[i].Name == name {
			return &Variants[i]
		}
	}
	return nil
}

// ForArch returns the variants of arch, in ascending order of preference.
func ForArch(arch string) []*Variant {
	var out []*Variant
	for i := range Variants {
		if Variants[i].Arch == arch {
			out = append(out, &Variants[i])
		}
	}
	return out
}

// Usable returns the variants of the host's architecture that it can run, in
// ascending order of preference: the last is the host's best.
func Usable(h Host) []*Variant {
	var out []*Variant
	for _, v := range ForArch(h.Arch) {
		if len(h.Missing(v)) == 0 {
			out = append(out, v)
		}
	}
	return out
}

// Missing returns the ISAs of v that the host lacks (none: the host can run v).
func (h *Host) Missing(v *Variant) []ISA {
	var out []ISA
	for _, isa := range v.ISAs {
		for _, f := range isa.Flags {
			if !h.Flags[f] {
				out = append(out, isa)
				break
			}
		}
	}
	if h.AMXDenied != "" && slices.ContainsFunc(v.ISAs, func(i ISA) bool { return i.Name == isaAMX.Name }) &&
		!slices.ContainsFunc(out, func(i ISA) bool { return i.Name == isaAMX.Name }) {
		out = append(out, ISA{Name: isaAMX.Name + ", which the kernel refused to enable (" + h.AMXDenied + ")"})
	}
	return out
}

// ParseChoice checks a --cpu-variant value for arch: auto (also ""), builtin or a
// variant's name. It returns the canonical spelling.
func ParseChoice(arch, s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "", Auto:
		return Auto, nil
	case Builtin:
		return Builtin, nil
	}
	if Find(arch, s) != nil {
		return s, nil
	}
	return "", fmt.Errorf("%w %q: choose auto, builtin or one of %s (the variants of %s)", ErrUnknown, s, strings.Join(names(ForArch(arch)), ", "), arch)
}

// ErrUnknown is wrapped by the error of a --cpu-variant that names no variant.
var ErrUnknown = errors.New("unknown CPU variant")

// ErrUnsupported is what every *UnsupportedError matches with errors.Is.
var ErrUnsupported = errors.New("the CPU cannot run the CPU variant")

// UnsupportedError is a variant forced on a CPU that lacks some of its instruction
// sets: running it would end in SIGILL, so the worker (and serve) refuse to start.
type UnsupportedError struct {
	Variant *Variant
	Missing []ISA
	// Usable are the variants this CPU can run, best last.
	Usable []string
}

func (e *UnsupportedError) Error() string {
	var miss []string
	for _, isa := range e.Missing {
		s := isa.Name
		if len(isa.Flags) > 0 {
			s += " (" + strings.Join(isa.Flags, " ") + ")"
		}
		miss = append(miss, s)
	}
	usable := "builtin or auto"
	if len(e.Usable) > 0 {
		usable = strings.Join(e.Usable, ", ") + ", builtin or auto"
	}
	return fmt.Sprintf("CPU variant %s needs %s, which this CPU lacks (not among the flags of /proc/cpuinfo); it would die with SIGILL. This CPU can run: %s",
		e.Variant.Name, strings.Join(miss, " and "), usable)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

func names(vs []*Variant) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}

// Check refuses a --cpu-variant that names no variant of the host's architecture
// (ErrUnknown) or one the host lacks an instruction set of (*UnsupportedError):
// what serve checks before it starts any worker.
func Check(h Host, choice string) error {
	name, err := ParseChoice(h.Arch, choice)
	if err != nil {
		return err
	}
	v := Find(h.Arch, name)
	if v == nil {
		return nil // auto or builtin
	}
	if miss := h.Missing(v); len(miss) > 0 {
		var usable []string
		for _, u := range ForArch(h.Arch) {
			if len(h.Missing(u)) == 0 {
				usable = append(usable, u.Name)
			}
		}
		return &UnsupportedError{Variant: v, Missing: miss, Usable: usable}
	}
	return nil
}

// Request is what Choose decides from.
type Request struct {
	// Host is the CPU (ReadHost, or ParseCPUInfo of a recorded file).
	Host Host
	// Choice is the operator's --cpu-variant: "" or auto, builtin, or a name.
	Choice string
	// Present are the names of the variants whose library is in the folder.
	Present []string
	// Builtin are the ggml features the compiled-in kernels were built with, as
	// ggml_backend_get_features reports them ("AVX2", "FMA", "AVX512", ...); nil
	// when unknown. Auto does not load a variant that brings nothing beyond them.
	Builtin []string
	// Expected says the build relies on the variants (a portable baseline was
	// compiled in), so that a folder without them is worth a warning.
	Expected bool
	// Dir is the folder, for messages.
	Dir string
}

// Choice is what a worker runs.
type Choice struct {
	// Variant is the library to load; nil for the compiled-in kernels.
	Variant *Variant
	// Note says why, in a few words, for logs and `embed-stack devices`.
	Note string
	// Warning, when set, says that the host's best variant could not be used
	// (its library is missing from the folder): the worker runs, more slowly than
	// it could. Logged at WARN and shown in /health.
	Warning string
	// Features are the ggml features of the kernels chosen, as
	// ggml_backend_get_features names them ("AVX2", "AVX512_BF16", ...): the
	// variant's, or the compiled-in kernels' (Request.Builtin). What a caller
	// asks of the kernels, such as whether BF16 weights take AVX-512 BF16's dot
	// products (package weights), it reads here.
	Features []string
	// Vendor is the host's CPU vendor (Host.Vendor), passed on to whoever
	// decides from the kernels' features what pays on this CPU.
	Vendor string
}

// VendorIntel is the vendor_id of Intel's x86 CPUs.
const VendorIntel = "GenuineIntel"

// BF16 is the ggml feature of kernels that multiply BF16 weights with AVX-512
// BF16's dot-product instruction (vdpbf16ps).
const BF16 = "AVX512_BF16"

// Name is the variant's name, or "builtin".
func (c Choice) Name() string {
	if c.Variant == nil {
		return Builtin
	}
	return c.Variant.Name
}

// Choose decides which CPU kernels a worker runs. Errors: an unknown name
// (ErrUnknown) and a variant the CPU cannot run (*UnsupportedError); a missing
// library is never an error, but a fallback with a Warning.
func Choose(r Request) (Choice, error) {
	c, err := choose(r)
	if err == nil {
		c.Features = kernelFeatures(c.Variant, r.Builtin)
		c.Vendor = r.Host.Vendor
	}
	return c, err
}

// kernelFeatures are the reported ggml features of v's kernels, or of the
// compiled-in ones (builtin) when v is nil, in ggml's order.
func kernelFeatures(v *Variant, builtin []string) []string {
	if v == nil {
		return slices.Clone(builtin)
	}
	var out []string
	for _, name := range reportedSIMD {
		for _, f := range v.GGML {
			if reportable[f] == name {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

func choose(r Request) (Choice, error) {
	arch := r.Host.Arch
	if err := Check(r.Host, r.Choice); err != nil {
		return Choice{}, err
	}
	choice, _ := ParseChoice(arch, r.Choice)
	usable := Usable(r.Host)
	present := func(v *Variant) bool { return slices.Contains(r.Present, v.Name) }
	builtin := func(note string) Choice {
		return Choice{Note: strings.TrimSpace("compiled-in kernels" + builtinFeatures(r.Builtin) + note)}
	}
	switch choice {
	case Builtin:
		return builtin(", as asked (--cpu-variant builtin)"), nil
	case Auto:
	default:
		v := Find(arch, choice)
		if !present(v) {
			c := builtin("")
			c.Warning = fmt.Sprintf("CPU variant %s was asked for (--cpu-variant), but %s is not in %s; running the %s instead (build it with `make cpu-variants`)", v.Name, v.Library(), r.Dir, c.Note)
			return c, nil
		}
		return Choice{Variant: v, Note: v.Describe() + ", as asked (--cpu-variant)"}, nil
	}

	if len(usable) == 0 {
		return builtin(": no CPU variant for this CPU"), nil
	}
	best := usable[len(usable)-1]
	covers := func(v *Variant) bool { return coveredBy(v, r.Builtin) }
	if covers(best) {
		return builtin(fmt.Sprintf(": they use every instruction set of %s, this CPU's best variant", best.Name)), nil
	}
	var pick *Variant
	for _, v := range slices.Backward(usable) {
		if present(v) && !covers(v) {
			pick = v
			break
		}
	}
	switch {
	case pick == best:
		return Choice{Variant: best, Note: best.Describe() + ": the best variant for this CPU"}, nil
	case pick != nil:
		return Choice{Variant: pick, Note: pick.Describe(),
			Warning: fmt.Sprintf("%s, the best CPU variant for this CPU, is not in %s; running %s instead (rebuild the folder with `make cpu-variants`)", best.Library(), r.Dir, pick.Name)}, nil
	case len(r.Present) > 0 || r.Expected:
		c := builtin("")
		c.Warning = fmt.Sprintf("%s, the best CPU variant for this CPU, is not in %s; running the %s instead, which can be several times slower (rebuild the folder with `make cpu-variants`)", best.Library(), r.Dir, c.Note)
		return c, nil
	}
	return builtin(fmt.Sprintf(": no CPU variant libraries in %s (`make cpu-variants` builds them)", r.Dir)), nil
}

// DamagedWarning is the Warning of a worker whose chosen library did not load, and
// which runs the compiled-in kernels instead.
func DamagedWarning(v *Variant, path, reason string, builtinFeats []string) Choice {
	c := Choice{Note: "compiled-in kernels" + builtinFeatures(builtinFeats), Features: slices.Clone(builtinFeats)}
	c.Warning = fmt.Sprintf("CPU variant %s did not load from %s (%s); running the %s instead (rebuild it with `make cpu-variants`, or remove it)", v.Name, path, reason, c.Note)
	return c
}

// reportable maps the ggml features variants.cmake builds with to the names ggml's
// CPU backend reports for them (ggml_backend_get_features); the others (SSE42,
// AMX_TILE, AMX_BF16) are not reported.
var reportable = map[string]string{
	"AVX": "AVX", "AVX_VNNI": "AVX_VNNI", "AVX2": "AVX2", "F16C": "F16C", "FMA": "FMA", "BMI2": "BMI2",
	"AVX512": "AVX512", "AVX512_VBMI": "AVX512_VBMI", "AVX512_VNNI": "AVX512_VNNI", "AVX512_BF16": "AVX512_BF16",
	"AMX_INT8": "AMX_INT8", "DOTPROD": "DOTPROD", "FP16_VECTOR_ARITHMETIC": "FP16_VA", "SVE": "SVE", "MATMUL_INT8": "MATMUL_INT8",
}

// coveredBy says whether the compiled-in kernels, built with the features
// builtin, already use every instruction set of v, so that loading v gains
// nothing. Unknown features (nil) cover nothing.
func coveredBy(v *Variant, builtin []string) bool {
	if builtin == nil {
		return false
	}
	for _, f := range v.GGML {
		if r, ok := reportable[f]; ok && !slices.Contains(builtin, r) {
			return false
		}
	}
	return true
}

// builtinFeatures is ", built for AVX2 FMA F16C" or "".
func builtinFeatures(feats []string) string {
	var simd []string
	for _, f := range feats {
		if slices.Contains(reportedSIMD, f) {
			simd = append(simd, f)
		}
	}
	if len(simd) == 0 {
		if feats != nil {
			return " (no SIMD beyond the architecture's baseline)"
		}
		return ""
	}
	return " (" + strings.Join(simd, " ") + ")"
}

// reportedSIMD are the features of ggml_backend_get_features that name
// instruction sets, in its order.
var reportedSIMD = []string{"SSE3", "SSSE3", "AVX", "AVX_VNNI", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "NEON", "ARM_FMA", "FP16_VA", "MATMUL_INT8", "SVE", "DOTPROD", "SME"}

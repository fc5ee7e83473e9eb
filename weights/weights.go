// Package weights chooses the weight file a model's workers load (issue 23): the
// GGUF as given, or a copy whose F16 matrices are converted to BF16 once, at load,
// into a cache folder, where the CPU kernels the workers run multiply BF16 with
// AVX-512 BF16's dot products (vdpbf16ps). Qwen publishes its embedding GGUFs in
// F16 and Q8_0 only, so without the conversion a user never gets BF16's speed.
// Where embed-stack's own kernels take the products, the copy holds the layers'
// matrices in their panel layout (panels.go), which the workers map as it is.
//
// The measured facts behind the policy (docs/performance.md, "Weights converted at
// load"), on an AMD Zen 5 (AVX-512 BF16, 2 cores): BF16 weights through the zen4
// kernels ran about 1.5 × F16 on 8 × 128 and 1.7 × on 32 × 128 (the 0.6B shape),
// with vectors at cosine ≥ 0.9999 to the float64 reference; on CPUs without AVX-512
// BF16 ggml multiplies BF16 by widening it to float32, with nothing to gain, and on
// a GPU the backend's own kernels decide. Intel's cores (an Emerald Rapids, AVX-512
// BF16, 2 cores) run vdpbf16ps at half the arithmetic of their float32 FMAs (AMD's
// Zen 4 and 5 at twice it): there BF16 through dot products ran 0.79 × the F16 file
// on one short input and 0.95 to 0.98 × on batches, and through embed-stack's
// kernels in FMAs over the widened values 1.2 to 1.4 × on batches ("An Intel host
// without AMX"). So Auto converts F16 matrices where the model runs on the CPU and
// the kernels that take its products multiply BF16 faster: embed-stack's own on a
// CPU with AVX512_BF16, or ggml's variant with AVX512_BF16 on a CPU not Intel's;
// nowhere else. It keeps F32 (a precision the user chose) and Q8_0 (a size the user chose:
// BF16 takes 1.9 times it, on disk and in memory, though it ran twice as fast on
// batches on the Zen 5). BF16 converts those too, for a user who wants the speed;
// Q8_0's values (int8 times an F16 scale, up to 19 significant bits) are then
// rounded to BF16's 8, as F16's 11 are.
//
// It knows GGUF files (package gguf) and where a worker computes (backends.Device);
// it refuses to know about flags, ggml and HTTP. A conversion that fails never stops
// a server: the workers then load the file as it is, with a warning.
package weights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/filelock"
)

// The --weights modes.
const (
	// Auto converts F16 matrices to BF16 where that pays (see the package doc).
	Auto = "auto"
	// File loads the GGUF as it is.
	File = "file"
	// BF16 converts F16, F32 and Q8_0 matrices to BF16 wherever the model runs:
	// for tests, and for users who measured that it pays on their machine.
	BF16 = "bf16"
)

// Modes are the --weights values, for messages.
var Modes = []string{Auto, File, BF16}

// ParseMode checks a --weights value; "" is Auto.
func ParseMode(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return Auto, nil
	}
	if !slices.Contains(Modes, s) {
		return "", fmt.Errorf("unknown weights mode %q: choose %s", s, strings.Join(Modes, ", "))
	}
	return s, nil
}

// converterVersion is part of every converted file's name: a change to what the
// conversion writes (its rounding, its choice of tensors) bumps it, so that files
// converted by an older embed-stack are never loaded.
const converterVersion = 1

// Request is what Load decides from.
type Request struct {
	// Source is the GGUF file as given (resolved from the Hub where it came from there).
	Source string
	// Mode is --weights: Auto ("" too), File or BF16.
	Mode string
	// Device returns where the workers compute and with which CPU kernels
	// (backends.ProbeDevice). Load calls it only when Auto has F16 matrices to
	// decide on; nil, or an error, keeps the file.
	Device func() (*backends.Device, error)
	// CacheDir is the folder of converted files; "" keeps the file (with a warning
	// when a conversion was wanted).
	CacheDir string
	// Rerank says the model is a reranker (a Qwen3-Reranker or a cross-encoder).
	// Auto keeps its weights: its score is one number a client sorts by, held to
	// 0.0025 of the file's in the rerank tests, and BF16 moved the tiny Qwen3
	// reranker's P(yes) by 0.0028 and the cross-encoders' by 0.0039 (where an
	// embedding keeps cosine 0.9999). BF16 converts it all the same.
	Rerank bool
}

// Result is the weight file the workers load.
type Result struct {
	// Path is the file: Source, or a converted copy in CacheDir.
	Path string
	// Type is the type of most of its matrices' values ("F16", "BF16", "Q8_0":
	// gguf.File.WeightType).
	Type string
	// From is Source's weight type when Path was converted from it at load, else "".
	From string
}

// Converted says the workers load a copy converted at load.
func (r Result) Converted() bool { return r.From != "" }

// Describe says which weights these are, for people: "BF16 (converted from F16)"
// or "F16 (the file's)", "unknown" for a type that could not be read.
func (r Result) Describe() string {
	t := r.Type
	if t == "" {
		t = "unknown"
	}
	if r.Converted() {
		return t + " (converted from " + r.From + ")"
	}
	return t + " (the file's)"
}

// Load returns the file the workers of Source load under Mode: for Auto and BF16,
// when there is something to convert, a converted copy in CacheDir, made on first
// use under a lock (two servers starting at once convert once) and reused while the
// source's path, size and modification time are unchanged. Every failure (a cache
// that cannot be written, a full disk) keeps the source, with a warning: the
// conversion is a speed-up, never a reason not to serve. It logs what it did.
func Load(ctx context.Context, r Request, logger *slog.Logger) Result {
	keep := Result{Path: r.Source}
	mode, err := ParseMode(r.Mode)
	if err != nil {
		logger.Warn("weights: "+err.Error()+"; loading the file as it is", "model", r.Source)
		return keepType(keep)
	}
	if mode == File {
		return keepType(keep)
	}
	src, err := gguf.Open(r.Source)
	if err != nil {
		logger.Warn("weights: cannot read the model file; loading it as it is", "model", r.Source, "err", err)
		return keep
	}
	defer src.Close()
	keep.Type = src.WeightType().String()
	plan := planFor(mode, src.Tensors())
	if plan.tensors == 0 {
		if mode == BF16 {
			logger.Info("weights: no F16, F32 or Q8_0 matrix to convert to BF16; loading the file as it is", "model", r.Source, "weights", keep.Type)
		}
		return keep
	}
	if mode == Auto && r.Rerank {
		logger.Debug("weights: keeping a reranker's weights (auto converts embedding models only)", "model", r.Source, "weights", keep.Type)
		return keep
	}
	var dev *backends.Device
	if r.Device != nil {
		dev, err = r.Device()
	}
	if mode == Auto {
		if err != nil || dev == nil {
			logger.Warn("weights: cannot tell which CPU kernels the workers run; loading the F16 weights as they are", "model", r.Source, "err", err)
			return keep
		}
		if why, ok := PaysOff(dev); !ok {
			logger.Debug("weights: keeping the file's weights", "model", r.Source, "weights", keep.Type, "why", why)
			return keep
		}
	}
	// Where embed-stack's kernels take the BF16 products, the copy holds the
	// layers' matrices in their layout (panels.go).
	if err == nil && dev != nil && dev.CPUAccelBF16 && !dev.GPU {
		plan = plan.withPanels(src.Tensors())
	}
	if r.CacheDir == "" {
		logger.Warn("weights: no cache folder for converted weights; loading the file as it is", "model", r.Source)
		return keep
	}
	path, err := convert(ctx, src, r.Source, r.CacheDir, plan, logger)
	if err != nil {
		logger.Warn("weights: converting to BF16 failed; loading the file as it is", "model", r.Source, "cache", r.CacheDir, "err", err)
		return keep
	}
	// The converted file's own weight type: BF16, unless most of its matrices are
	// of a type no mode converts (a Q8_0 file with a few F16 matrices).
	return keepType(Result{Path: path, From: keep.Type})
}

// keepType fills in the source's weight type, where it can be read.
func keepType(r Result) Result {
	if f, err := gguf.Open(r.Path); err == nil {
		r.Type = f.WeightType().String()
		f.Close()
	}
	return r
}

// PaysOff says whether converting F16 matrices to BF16 speeds up workers on dev
// (Auto's rule), and why or why not: only on the CPU, where the kernels that take
// the weight products multiply BF16 faster than ggml multiplies F16. Those are
// embed-stack's own where they take BF16 products (dev.CPUAccelBF16: every BF16
// matrix, whichever ggml variant runs the rest): AMX tiles where the CPU has them
// (Intel's from Sapphire Rapids on), else AVX512_BF16's dot products on AMD's
// cores, float32 FMAs over the widened values on Intel's, whose dot products
// do half the arithmetic of their FMAs (on an Emerald Rapids the 0.6B shape's
// batches ran 1.2 to 1.4 times the F16 file's speed that way, against 0.95 to 0.98
// with the dot products). Not on AVX-512 CPUs without AVX512_BF16 (Skylake-SP to
// Ice Lake), whose kernels multiply BF16 in those FMAs too: on a Zen 5 run that way
// 1.13 to 1.21 times the F16 file's speed back to back, but without the kernels'
// attention a short call alternates between their thread pool and ggml's, and a
// query after 500 ms idle took 96 to 101 ms against ggml's 69 to 74. Not with the
// AVX2 kernels: 256-bit FMAs over widened BF16 do what ggml's F16 products do, and
// ran at 0.77 to 0.91 times their speed. Else ggml's variant's, which multiply BF16 with dot
// products only, so not on Intel's CPUs (about even with F16 there; F16 keeps
// three more significand bits). docs/performance.md, "An Intel host without AMX".
func PaysOff(dev *backends.Device) (why string, ok bool) {
	bf16 := slices.Contains(dev.CPUFeatures, cpuvariant.BF16)
	switch {
	case dev.GPU:
		return "the model runs on a GPU (" + dev.Name + ")", false
	case dev.CPUAccelBF16 && strings.Contains(dev.CPUAccel, "AMX"):
		return fmt.Sprintf("%s multiply BF16 in AMX tiles", dev.CPUAccel), true
	case dev.CPUAccelBF16 && strings.Contains(dev.CPUAccel, "AVX2"):
		return fmt.Sprintf("%s multiply BF16 in 256-bit float32 FMAs, no faster than ggml's F16 products there (0.77 to 0.91 times on the 0.6B shape), and F16 keeps 3 more bits", dev.CPUAccel), false
	case dev.CPUAccelBF16 && strings.Contains(dev.CPUAccel, "BF16 in FMAs"):
		return fmt.Sprintf("%s multiply BF16 in float32 FMAs on this CPU without AVX512_BF16, 1.13 to 1.21 times ggml's F16 products back to back, but a short query after an idle spell took 1.4 times as long (their products and ggml's attention alternate between two thread pools), so the F16 file stays", dev.CPUAccel), false
	case dev.CPUAccelBF16 && dev.CPUVendor == cpuvariant.VendorIntel:
		return fmt.Sprintf("%s multiply BF16 in float32 FMAs, faster than ggml's F16 products on Intel's cores", dev.CPUAccel), true
	case dev.CPUAccelBF16:
		return fmt.Sprintf("%s multiply BF16 with AVX512_BF16", dev.CPUAccel), true
	case bf16 && dev.CPUVendor == cpuvariant.VendorIntel:
		return fmt.Sprintf("the CPU kernels (%s) multiply BF16 with AVX-512 BF16's dot products, which Intel's cores run at half the arithmetic of their float32 FMAs, so BF16 weights compute no faster than F16 here (embed-stack's kernels, which would multiply BF16 in FMAs, are off: --cpu-accel), and F16 keeps 3 more bits", dev.CPUVariant), false
	case !bf16:
		return fmt.Sprintf("the CPU kernels (%s) lack AVX512_BF16 and embed-stack's kernels do not multiply BF16 here (--cpu-accel), so BF16 weights would be widened to float32, not multiplied faster", dev.CPUVariant), false
	}
	return fmt.Sprintf("the CPU kernels (%s) multiply BF16 with AVX512_BF16", dev.CPUVariant), true
}

// plan is which tensors a mode converts to BF16.
type plan struct {
	// from are the source types converted, tag names them in the file name.
	from    []gguf.GGMLType
	tag     string
	tensors int
	// panels are the converted matrices written in the layout of embed-stack's
	// BF16 kernels (panels.go); none unless withPanels.
	panels []string
}

// withPanels is p writing every converted matrix panelMatrix takes as panels, its
// tag saying so, so that a copy for those kernels and a plain one never share a
// name.
func (p plan) withPanels(tensors []gguf.TensorInfo) plan {
	p.panels = nil
	for _, t := range tensors {
		if p.converts(t) && panelMatrix(t) {
			p.panels = append(p.panels, t.Name)
		}
	}
	if len(p.panels) > 0 {
		p.tag += panelTag
	}
	return p
}

// options are the conversion's: the matrices to BF16, and where p has panels, those
// laid out as panels, named in the metadata, the data aligned for the kernels.
func (p plan) options() gguf.ConvertOptions {
	o := gguf.ConvertOptions{To: gguf.TypeBF16, Convert: p.converts}
	if len(p.panels) == 0 {
		return o
	}
	o.Alignment = panelAlignment
	o.KVs = []gguf.KV{{Key: panelsKey, Value: slices.Clone(p.panels)}, {Key: panelWidthKey, Value: uint32(panelWidth)}}
	o.Layout = func(t gguf.TensorInfo, w io.Writer) io.Writer {
		if !slices.Contains(p.panels, t.Name) {
			return nil
		}
		return newPanelWriter(w, int(t.Dims[0]))
	}
	return o
}

func (p plan) converts(t gguf.TensorInfo) bool {
	return len(t.Dims) >= 2 && slices.Contains(p.from, t.Type) && strings.HasSuffix(t.Name, ".weight") &&
		!slices.ContainsFunc(keptMatrices, func(s string) bool { return strings.Contains(t.Name, s) })
}

// keptMatrices are the matrices never converted: llama.cpp adds BERT's position
// and token-type embeddings to the activations directly, and ggml's CPU kernels
// add no BF16 operand to F32 ("binary_op: unsupported types: dst: f32, src0: f32,
// src1: bf16": the worker aborts); T5's relative attention bias and Mamba's
// convolution are small and read the same way. llama.cpp's quantizer leaves the
// same tensors as they are.
var keptMatrices = []string{"position_embd", "token_types", "attn_rel_b", "ssm_conv1d"}

// planFor is mode's conversion of tensors: Auto's F16 weight matrices, BF16's F16,
// F32 and Q8_0 ones, but for keptMatrices. Vectors (norms, biases) are never
// converted: ggml adds and multiplies them element-wise in F32, where BF16 would
// only lose precision. The tag of BF16's plan names Q8_0 only where it converts a
// Q8_0 matrix, so that the copies of F16 files keep the names they had.
func planFor(mode string, tensors []gguf.TensorInfo) plan {
	p := plan{from: []gguf.GGMLType{gguf.TypeF16}, tag: "f16"}
	if mode == BF16 {
		p.from, p.tag = append(p.from, gguf.TypeF32, gguf.TypeQ8_0), "f16-f32"
	}
	q8 := false
	for _, t := range tensors {
		if p.converts(t) {
			p.tensors++
			q8 = q8 || t.Type == gguf.TypeQ8_0
		}
	}
	if q8 {
		p.tag += "-q8_0"
	}
	return p
}

// convert returns the converted copy of src in dir, converting it first unless
// another process (or an earlier start) already has.
func convert(ctx context.Context, src *gguf.File, source, dir string, p plan, logger *slog.Logger) (string, error) {
	name, prefix, abs, err := cachedName(source, p)
	if err != nil {
		return "", err
	}
	// Absolute, so that the workers' --model names the file wherever they run.
	if dir, err = filepath.Abs(dir); err != nil {
		return "", err
	}
	target := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(dir, ".locks"), 0o755); err != nil {
		return "", err
	}
	unlock, err := filelock.Lock(ctx, filepath.Join(dir, ".locks", name+".lock"), func() {
		logger.Info("weights: waiting for another process converting the same file", "model", source, "target", target)
	})
	if err != nil {
		return "", err
	}
	defer unlock()
	if st, err := os.Stat(target); err == nil && st.Mode().IsRegular() {
		logger.Info("weights: loading BF16 weights converted earlier", "model", source, "file", target, "converted", p.tag)
		return target, nil
	}
	start := time.Now()
	st, err := src.ConvertWith(target, p.options())
	if err != nil {
		return "", err
	}
	logger.Info("weights: converted to BF16 at load", "model", source, "file", target, "converted", p.tag,
		"tensors", st.Tensors, "panels", len(p.panels), "source_bytes", st.SourceBytes, "bf16_bytes", st.TargetBytes, "file_bytes", st.FileBytes,
		"seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()))
	// The source's path beside the copy, so that a later conversion can tell a
	// copy whose source is gone (a model deleted, a test's temporary file).
	if err := os.WriteFile(target+sourceSuffix, []byte(abs), 0o644); err != nil {
		logger.Warn("weights: cannot record the source of a converted file", "file", target, "err", err)
	}
	// The same conversion in the other layout stays: a server started with other
	// settings (--cpu-accel off) may be loading it, or spawn an ephemeral worker on
	// it later.
	removeStale(dir, prefix, ".bf16-"+p.tag+".gguf", name, logger)
	return target, nil
}

// cachedName names the converted copy of source: a hash of its absolute path
// (prefix, shared by every version of the file), a hash of its size, modification
// time, the converter's version and what is converted, and its base name, so that a
// changed source or a new converter is converted again and a person can tell the
// files apart.
func cachedName(source string, p plan) (name, prefix, abs string, err error) {
	if abs, err = filepath.Abs(source); err != nil {
		return "", "", "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real // a Hub snapshot is a symlink to its blob
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", "", "", err
	}
	ph := sha256.Sum256([]byte(abs))
	prefix = hex.EncodeToString(ph[:6]) + "-"
	id := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%d\x00%s", abs, st.Size(), st.ModTime().UnixNano(), converterVersion, p.tag))
	base := strings.TrimSuffix(filepath.Base(source), ".gguf")
	return prefix + hex.EncodeToString(id[:6]) + "-" + base + ".bf16-" + p.tag + ".gguf", prefix, abs, nil
}

// sourceSuffix names the file beside each converted copy that holds its source's
// path.
const sourceSuffix = ".source"

// removeStale removes the copies converted the same way (suffix) from earlier
// versions of the same source (prefix: same path; another size, time or
// converter), and every copy whose recorded source no longer exists: nothing
// loads them any more. A worker still running on one keeps its mapping; the space comes back
// when it exits.
func removeStale(dir, prefix, suffix, keep string, logger *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		outdated := strings.HasPrefix(n, prefix) && strings.HasSuffix(n, suffix)
		if n == keep || !strings.HasSuffix(n, ".gguf") || !outdated && !sourceGone(filepath.Join(dir, n)) {
			continue
		}
		os.Remove(filepath.Join(dir, n+sourceSuffix))
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			logger.Warn("weights: cannot remove an outdated converted file", "file", filepath.Join(dir, n), "err", err)
			continue
		}
		logger.Info("weights: removed an outdated converted file", "file", filepath.Join(dir, n))
	}
}

// sourceGone says that the converted file's recorded source no longer exists; a
// copy without a record is kept.
func sourceGone(converted string) bool {
	src, err := os.ReadFile(converted + sourceSuffix)
	if err != nil {
		return false
	}
	_, err = os.Stat(string(src))
	return errors.Is(err, os.ErrNotExist)
}

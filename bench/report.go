package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/weights"
)

// Report is one run: where it ran, what was compared, every result, and the goals.
// It is written as JSON as it stands; Table renders it for people.
type Report struct {
	Started    time.Time          `json:"started"`
	Finished   time.Time          `json:"finished"`
	Seconds    float64            `json:"seconds"`
	Command    string             `json:"command,omitempty"`
	Host       Host               `json:"host"`
	Model      *Model             `json:"model,omitempty"`
	Contenders []*ContenderReport `json:"contenders"`
	Shapes     []ShapeInfo        `json:"shapes"`
	Results    []Result           `json:"results"`
	Goals      []Goal             `json:"goals,omitempty"`
	// CheckControl shows the vector check catching a wrong computation on this
	// model (nil without a floor).
	CheckControl *Control `json:"check_control,omitempty"`
}

// Control is the vector check's negative control: the reference computing something
// slightly wrong on purpose, and whether the check would have refused it.
type Control struct {
	What      string  `json:"what"`
	MaxCosine float64 `json:"max_cosine"`
	Caught    bool    `json:"caught"`
	Error     string  `json:"error,omitempty"`
}

// Host is the machine the run used.
type Host struct {
	CPUs int    `json:"cpus"`
	CPU  string `json:"cpu,omitempty"`
	// CPUID is the x86 family and model ("family 25 model 1") and SIMD the vector
	// extensions the kernel exposes that ggml's CPU kernels use (/proc/cpuinfo
	// flags): the same CPU name can come with or without AVX-512, and which weight
	// type is fastest depends on it (docs/performance.md, "Weight type and kernel").
	CPUID string   `json:"cpu_id,omitempty"`
	SIMD  []string `json:"simd,omitempty"`
	// CPUKernels is the build of ggml's CPU kernels the floor ran: a variant
	// library ("haswell", "zen4", ...) or "builtin", the kernels compiled into the
	// binary (backends/cpuvariant), followed by " with embed-stack kernels (...)"
	// when embed-stack's own CPU kernels (--cpu-accel) took part; "" without a floor.
	CPUKernels string `json:"cpu_kernels,omitempty"`
	// Weights is the type of the weights the floor computed with ("F16", "BF16"),
	// and WeightsConvertedFrom the file's type where they were converted at load
	// (bench --weights, package weights), as serve's /info names a model's; ""
	// without a floor.
	Weights              string `json:"weights,omitempty"`
	WeightsConvertedFrom string `json:"weights_converted_from,omitempty"`
	OS                   string `json:"os"`
	Arch                 string `json:"arch"`
	GoVersion            string `json:"go_version"`
	// Load averages (1, 5, 15 minutes) at the start and end, and the highest
	// 1-minute figure seen at the start of a shape: other work on the machine.
	LoadStart [3]float64 `json:"load_start"`
	LoadEnd   [3]float64 `json:"load_end"`
	LoadMax1  float64    `json:"load_max_1m"`
}

// ContenderReport is what the run found about one contender.
type ContenderReport struct {
	Name        string  `json:"name"`
	Role        Role    `json:"role"`
	About       string  `json:"about,omitempty"`
	PID         int     `json:"pid,omitempty"`
	ColdStartMS float64 `json:"cold_start_ms,omitempty"`
	// CacheMiB is its embedding cache (serve --cache-size), 0 without one.
	CacheMiB int          `json:"cache_mib,omitempty"`
	Check    *CheckResult `json:"check,omitempty"`
	// Excluded says why it was not timed.
	Excluded string `json:"excluded,omitempty"`
	// Idle is its process tree before the first shape; After once the last shape
	// is done and its short-lived workers have exited; Memory the sampler's peak.
	Idle        *TreeSnapshot `json:"idle,omitempty"`
	After       *TreeSnapshot `json:"after,omitempty"`
	Memory      *TreeStats    `json:"memory,omitempty"`
	MemoryError string        `json:"memory_error,omitempty"`
}

// ShapeInfo describes a shape in the report.
type ShapeInfo struct {
	ID     string    `json:"id"`
	Kind   ShapeKind `json:"kind"`
	About  string    `json:"about"`
	Tokens int       `json:"tokens_per_request,omitempty"`
	Warmup int       `json:"warmup"`
	Reps   int       `json:"reps"`
	Expect int       `json:"expect,omitempty"`
}

// Result is one contender on one shape. Latencies are in milliseconds over every
// timed request; TokensPerSec and RequestsPerSec over repetitions (for a request
// shape a repetition is one request; for a clients shape one timed period).
type Result struct {
	Shape     string `json:"shape"`
	Contender string `json:"contender"`
	Skipped   string `json:"skipped,omitempty"`

	Requests     int            `json:"requests,omitempty"`
	Tokens       int            `json:"tokens_per_request,omitempty"`
	Statuses     map[string]int `json:"statuses,omitempty"`
	Errors       int            `json:"errors,omitempty"`
	FirstError   string         `json:"first_error,omitempty"`
	WarmupErrors int            `json:"warmup_errors,omitempty"`
	// TokenMismatches counts 200s (warm-ups included) whose usage.prompt_tokens
	// is not the count sent: the server embedded other tokens than the floor.
	TokenMismatches int    `json:"token_mismatches,omitempty"`
	FirstMismatch   string `json:"first_mismatch,omitempty"`

	LatencyMS      Summary `json:"latency_ms"`
	TokensPerSec   Summary `json:"tokens_per_sec"`
	RequestsPerSec Summary `json:"requests_per_sec"`
	// CPUSeconds is the CPU time the contender used for the timed work (its
	// process tree; this process for the floor), and TokensPerCPUSec the tokens
	// embedded per CPU-second: a figure the neighbours' load moves much less than
	// tokens/s. Absent where it is not measured.
	CPUSeconds      float64 `json:"cpu_seconds,omitempty"`
	TokensPerCPUSec float64 `json:"tokens_per_cpu_sec,omitempty"`
	// GFLOPS is the median tokens/s times the model's FLOPs per token, for shapes
	// whose inputs share one length.
	GFLOPS float64 `json:"gflops,omitempty"`
	// LoadAvg1 is the 1-minute load average when the shape started.
	LoadAvg1 float64 `json:"load_avg_1m"`

	// The in-flight shape: the same queries idle and beside the long input (those
	// beside it include any given up on after twice the window, at that time), how
	// long the long input ran, whether it was cancelled at the end of the window,
	// and how long the server took to be idle again.
	IdleMS        *Summary `json:"idle_ms,omitempty"`
	InFlightMS    *Summary `json:"in_flight_ms,omitempty"`
	LongMS        float64  `json:"long_ms,omitempty"`
	LongCancelled bool     `json:"long_cancelled,omitempty"`
	DrainMS       float64  `json:"drain_ms,omitempty"`

	// Reindex is the re-index shape's account: priming, cache use, the timed
	// pass and the comparison of its vectors with the reference's.
	Reindex *ReindexResult `json:"reindex,omitempty"`
}

func (r *Result) line() string {
	if r.Skipped != "" {
		return "skipped: " + r.Skipped
	}
	s := fmt.Sprintf("%d req, %d err, p50 %.1f ms, p95 %.1f ms, %.1f tok/s", r.Requests, r.Errors, r.LatencyMS.Median, r.LatencyMS.P95, r.TokensPerSec.Median)
	if r.Reindex != nil {
		s += "; " + r.Reindex.line()
	}
	if r.InFlightMS != nil {
		s += fmt.Sprintf(", idle p50 %.1f ms, in flight p95 %.1f ms (n=%d)", r.IdleMS.Median, r.InFlightMS.P95, r.InFlightMS.N)
	}
	if r.FirstError != "" {
		s += ", first error: " + r.FirstError
	}
	return s
}

// Result returns the result of contender on shape, or nil.
func (rep *Report) Result(shape, contender string) *Result {
	for i := range rep.Results {
		if r := &rep.Results[i]; r.Shape == shape && r.Contender == contender {
			return r
		}
	}
	return nil
}

// ByRole returns the first contender of role, or nil.
func (rep *Report) ByRole(role Role) *ContenderReport {
	for _, c := range rep.Contenders {
		if c.Role == role {
			return c
		}
	}
	return nil
}

// WriteJSON writes the report, indented.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("bench: write JSON: %w", err)
	}
	return nil
}

// cpuLabel is the CPU as the table's first line shows it: name, family and model,
// and its SIMD extensions ("AMD EPYC, family 25 model 1, AVX2 FMA F16C, no AVX-512").
func (h Host) cpuLabel() string {
	parts := []string{orDash(h.CPU)}
	if h.CPUID != "" {
		parts = append(parts, h.CPUID)
	}
	if len(h.SIMD) > 0 {
		s := strings.ToUpper(strings.Join(h.SIMD, " "))
		if !slices.Contains(h.SIMD, "avx512f") {
			s += ", no AVX-512"
		}
		parts = append(parts, s)
	}
	if h.CPUKernels != "" {
		parts = append(parts, "CPU kernels "+h.CPUKernels)
	}
	if h.Weights != "" {
		parts = append(parts, "weights "+weights.Result{Type: h.Weights, From: h.WeightsConvertedFrom}.Describe())
	}
	return strings.Join(parts, ", ")
}

// Table writes the report as Markdown: the machine, the contenders, one row per
// shape and contender with its ratio to the floor and to each peer, memory,
// and the goals.
func (rep *Report) Table(w io.Writer) error {
	var b strings.Builder
	h := rep.Host
	fmt.Fprintf(&b, "Run of %s: %.0f s on %d CPUs (%s), load average %.2f at the start, %.2f at the end, %.2f at most.\n\n",
		rep.Started.Format(time.RFC3339), rep.Seconds, h.CPUs, h.cpuLabel(), h.LoadStart[0], h.LoadEnd[0], h.LoadMax1)
	if m := rep.Model; m != nil {
		fmt.Fprintf(&b, "Model %s: %s, %d layers, n_embd %d, %d heads (%d KV) of %d, %.3g parameters of which %.3g in the layers' matrices; %.3g GFLOP per token at 128 tokens, %.3g at 2048; KV cache %.1f KiB per token (F16).\n\n",
			m.Path, m.Arch, m.Layers, m.Embd, m.Heads, m.KVHeads, m.HeadDim, float64(m.Params), float64(m.LinearParams),
			m.FLOPsPerToken(128)/1e9, m.FLOPsPerToken(2048)/1e9, float64(m.KVBytesPerToken(2))/1024)
	}
	floor := rep.ByRole(RoleFloor)
	var peers []*ContenderReport
	for _, c := range rep.Contenders {
		if c.Role == RolePeer {
			peers = append(peers, c)
		}
	}

	b.WriteString("| contender | role | vector check | cold start | idle RSS (PSS) | peak RSS (PSS) | processes idle → after |\n|---|---|---|---|---|---|---|\n")
	for _, c := range rep.Contenders {
		check := "reference"
		if c.Check != nil {
			check = fmt.Sprintf("min cos %.6f (separation %.3f)", c.Check.MinCosine, c.Check.Separation)
			if !c.Check.Pass {
				check = "**failed**: " + c.Check.Reason
			}
		}
		cold, idle, peak, procs := "–", "–", "–", "–"
		if c.ColdStartMS > 0 {
			cold = fmt.Sprintf("%.2f s", c.ColdStartMS/1000)
		}
		if c.Idle != nil {
			idle = memPair(c.Idle)
		}
		if c.Memory != nil {
			peak = memPair(&c.Memory.Peak)
		}
		if c.Idle != nil && c.After != nil {
			procs = fmt.Sprintf("%d → %d", len(c.Idle.Procs), len(c.After.Procs))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", c.Name, c.Role, check, cold, idle, peak, procs)
	}
	b.WriteString("\n")
	for _, c := range rep.Contenders {
		if c.About != "" {
			fmt.Fprintf(&b, "- %s: %s\n", c.Name, c.About)
		}
	}
	if best, shape := bestFloorGFLOPS(rep); best > 0 {
		kernels := "the model's"
		switch {
		case h.Weights != "": // the floor's, converted at load or not
			kernels = h.Weights
		case rep.Model != nil && rep.Model.WeightType != "":
			kernels = rep.Model.WeightType
		}
		who := "llama.cpp's " + kernels + " kernels"
		if _, accel, ok := strings.Cut(h.CPUKernels, " with "); ok {
			// embed-stack's own CPU kernels (--cpu-accel) took some of the products.
			who = "llama.cpp's " + kernels + " kernels with " + accel
		}
		fmt.Fprintf(&b, "\nMatrix-multiply throughput measured here: the floor reached %.1f GFLOP/s (%s, tokens/s × FLOPs per token) on %s; the GFLOP/s column reads every other figure against it.\n", best, who, shape)
	}
	if c := rep.CheckControl; c != nil {
		switch {
		case c.Error != "":
			fmt.Fprintf(&b, "\nNegative control of the vector check (%s) failed: %s\n", c.What, c.Error)
		case c.Caught:
			fmt.Fprintf(&b, "\nNegative control: %s agree with the right vectors to cosine %.4f at best, so the check would refuse a server that forgets that token.\n", c.What, c.MaxCosine)
		default:
			fmt.Fprintf(&b, "\nNegative control: %s agree with the right vectors to cosine %.6f: **on this model the check cannot catch a server that forgets that token**.\n", c.What, c.MaxCosine)
		}
	}
	b.WriteString("\n")

	ratioHead := ""
	if floor != nil {
		ratioHead += " tok/s ÷ floor |"
	}
	for _, peer := range peers {
		ratioHead += fmt.Sprintf(" tok/s ÷ %s |", peer.Name)
	}
	fmt.Fprintf(&b, "| shape | contender | req | err | p50 ms | p95 ms | p99 ms | tok/s | spread |%s tok/CPU-s (÷ floor) | GFLOP/s | load |\n", ratioHead)
	b.WriteString("|---|---|---|---|---|---|---|---|---|" + strings.Repeat("---|", strings.Count(ratioHead, "|")) + "---|---|---|\n")
	for _, s := range rep.Shapes {
		for _, c := range rep.Contenders {
			r := rep.Result(s.ID, c.Name)
			if r == nil || r.Skipped != "" {
				continue
			}
			lat := r.LatencyMS
			if r.InFlightMS != nil {
				lat = *r.InFlightMS
			}
			ratios := ""
			if floor != nil {
				ratios += " " + ratio(r, rep.Result(s.ID, floor.Name)) + " |"
			}
			for _, peer := range peers {
				ratios += " " + ratio(r, rep.Result(s.ID, peer.Name)) + " |"
			}
			gflops := "–"
			if r.GFLOPS > 0 {
				gflops = fmt.Sprintf("%.1f", r.GFLOPS)
			}
			spread := "–"
			if r.TokensPerSec.N > 1 {
				spread = fmt.Sprintf("±%.0f%%", 50*r.TokensPerSec.Spread())
			}
			tps := "–"
			if r.TokensPerSec.N > 0 {
				tps = fmt.Sprintf("%.1f", r.TokensPerSec.Median)
			}
			errs := fmt.Sprint(r.Errors)
			if r.Errors > 0 || r.TokenMismatches > 0 {
				errs = fmt.Sprintf("**%d** (%s)", r.Errors+r.TokenMismatches, firstNonEmpty(r.FirstError, r.FirstMismatch))
			}
			cpu := "–"
			if r.TokensPerCPUSec > 0 {
				cpu = fmt.Sprintf("%.1f", r.TokensPerCPUSec)
				if floor != nil {
					if f := rep.Result(s.ID, floor.Name); f != nil && f.TokensPerCPUSec > 0 {
						cpu += fmt.Sprintf(" (%.2f×)", r.TokensPerCPUSec/f.TokensPerCPUSec)
					}
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %.1f | %.1f | %.1f | %s | %s |%s %s | %s | %.1f |\n",
				s.ID, c.Name, r.Requests, errs, lat.Median, lat.P95, lat.P99, tps, spread, ratios, cpu, gflops, r.LoadAvg1)
		}
	}
	inFlightHeader := false
	for _, s := range rep.Shapes {
		if s.Kind != KindInFlight {
			continue
		}
		if !inFlightHeader {
			b.WriteString("\nIn flight (latencies of the short queries above are those beside the long input):\n\n| shape | contender | idle p50 ms | in flight p50 ms | p95 ms | n | p95 ÷ idle p50 | long input | drain |\n|---|---|---|---|---|---|---|---|---|\n")
			inFlightHeader = true
		}
		for _, c := range rep.Contenders {
			r := rep.Result(s.ID, c.Name)
			if r == nil || r.Skipped != "" || r.IdleMS == nil {
				continue
			}
			long := fmt.Sprintf("done in %.1f s", r.LongMS/1000)
			if r.LongCancelled {
				long = fmt.Sprintf("cancelled after %.1f s", r.LongMS/1000)
			}
			fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.1f | %d | %.2f | %s | %.1f s |\n", s.ID, c.Name, r.IdleMS.Median, r.InFlightMS.Median, r.InFlightMS.P95, r.InFlightMS.N,
				r.InFlightMS.P95/r.IdleMS.Median, long, r.DrainMS/1000)
		}
	}
	rep.reindexTable(&b)
	var skipped []string
	for _, r := range rep.Results {
		if r.Skipped != "" {
			skipped = append(skipped, fmt.Sprintf("%s on %s (%s)", r.Shape, r.Contender, r.Skipped))
		}
	}
	if len(skipped) > 0 {
		b.WriteString("\nSkipped: " + strings.Join(skipped, "; ") + ".\n")
	}
	if len(rep.Goals) > 0 {
		b.WriteString("\n| goal | target | measured | met |\n|---|---|---|---|\n")
		for _, g := range rep.Goals {
			met := "no"
			switch {
			case g.Met == nil:
				met = "n/a"
			case *g.Met:
				met = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Name, g.Target, g.Measured, met)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ratio is r's median tokens/s over base's, as "1.02×"; "–" without both.
func ratio(r, base *Result) string {
	if r == nil || base == nil || base.Skipped != "" || base.TokensPerSec.N == 0 || r.TokensPerSec.N == 0 || base.TokensPerSec.Median == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r.TokensPerSec.Median/base.TokensPerSec.Median)
}

func mib(b int64) string {
	return fmt.Sprintf("%.0f MiB", math.Round(float64(b)/(1<<20)))
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// bestFloorGFLOPS is the floor's highest achieved FLOP rate and its shape.
func bestFloorGFLOPS(rep *Report) (float64, string) {
	floor := rep.ByRole(RoleFloor)
	if floor == nil {
		return 0, ""
	}
	best, shape := 0.0, ""
	for _, r := range rep.Results {
		if r.Contender == floor.Name && r.GFLOPS > best {
			best, shape = r.GFLOPS, r.Shape
		}
	}
	return best, shape
}

// memPair is a tree's RSS and, when read, its PSS.
func memPair(s *TreeSnapshot) string {
	if s.PSS > 0 {
		return fmt.Sprintf("%s (%s)", mib(s.RSS), mib(s.PSS))
	}
	return mib(s.RSS)
}

// reindexTable writes the re-index shape's own table: priming, the timed pass, the
// cache's share and the comparison with the reference, one row per contender.
func (rep *Report) reindexTable(b *strings.Builder) {
	for _, s := range rep.Shapes {
		if s.Kind != KindReindex {
			continue
		}
		fmt.Fprintf(b, "\nRe-index (%s; times are the sums of each contender's own requests):\n\n", s.About)
		b.WriteString("| contender | cache | priming pass | timed pass | docs/s | cached tokens | tok/s ÷ reference | vectors bit-identical to the reference | lowest cosine |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range rep.Contenders {
			r := rep.Result(s.ID, c.Name)
			if r == nil || r.Skipped != "" || r.Reindex == nil {
				continue
			}
			a := r.Reindex
			cache := "none"
			if c.CacheMiB > 0 {
				cache = fmt.Sprintf("%d MiB", c.CacheMiB)
			}
			speed, same, cos := "reference", "reference", "–"
			if a.Reference != "" {
				speed = fmt.Sprintf("%.2f× %s", a.Speedup, a.Reference)
				same = fmt.Sprintf("%d of %d", a.BitIdentical, a.Compared)
				if a.FirstDiffer != "" {
					same += "; first differing: " + a.FirstDiffer
				}
				cos = fmt.Sprintf("%.6f", a.MinCosine)
			}
			fmt.Fprintf(b, "| %s | %s | %.2f s | %.2f s | %.1f | %d of %d | %s | %s | %s |\n",
				c.Name, cache, a.PrimeSeconds, a.Seconds, a.DocsPerSec, a.CachedTokens, a.Tokens, speed, same, cos)
		}
	}
}

package backends

import (
	"context"
	"strings"
)

// Health statuses reported by GET /health.
const (
	StatusReady   = "ready"   // 200: /embed is served
	StatusLoading = "loading" // 503: the model is still loading
)

// Paths of the worker protocol.
const (
	pathHealth = "/health"
	pathEmbed  = "/embed"
)

// Health is the body of GET /health.
type Health struct {
	Status string `json:"status"` // StatusReady or StatusLoading

	// The fields below are set once the worker is ready.

	// NEmbd is the length of every vector the worker returns.
	NEmbd int `json:"n_embd,omitempty"`
	// MaxTokens is the longest single sequence the worker accepts (its context size).
	MaxTokens int `json:"max_tokens,omitempty"`
	// MaxBatchTokens is the token budget the worker decodes together; callers should
	// not put more tokens than this into one /embed request, and the request body
	// limit is sized from it.
	MaxBatchTokens int `json:"max_batch_tokens,omitempty"`
	// Model names the loaded model (its GGUF general.name or file name).
	Model string `json:"model,omitempty"`
	// ShortJobs, when set, says which /embed requests the worker runs ahead of a
	// long input it is decoding (see ShortJobs); absent, requests run in turn.
	ShortJobs *ShortJobs `json:"short_jobs,omitempty"`

	// Device is where the worker computes, with its memory read at the time of
	// the answer; absent for workers that do not say (mlx-embed-server).
	Device *Device `json:"device,omitempty"`

	// PID is the worker's process id, set in every state, for logs and for checks
	// that a stopped worker is gone.
	PID int `json:"pid"`
}

// Info returns the engine description carried by a ready Health.
func (h Health) Info() EngineInfo {
	return EngineInfo{NEmbd: h.NEmbd, MaxTokens: h.MaxTokens, MaxBatchTokens: h.MaxBatchTokens, Model: h.Model, Device: h.Device, ShortJobs: h.ShortJobs}
}

// ShortJobs describes the /embed requests a worker lets jump ahead: while it
// decodes a long input, a request of at most MaxSeqs sequences, each of at most
// MaxTokens tokens and BatchTokens in all, runs between (or by interrupting) the
// long input's decode calls instead of waiting for it to finish. Queries are such
// requests; sending them apart from documents (as routing's batcher does) keeps
// their latency near idle beside long documents. The vectors are the same either
// way.
//
// Fits is the one rule both sides apply: the llama.cpp engine (backends/llama) to
// decide which Embed calls may run inside a long one, the router (through the
// worker's /health) to decide which requests to send apart.
type ShortJobs struct {
	MaxTokens   int `json:"max_tokens"`
	BatchTokens int `json:"batch_tokens"`
	MaxSeqs     int `json:"max_seqs"`
}

// Fits says whether a request of seqs is a short job; never for a nil s (a worker
// that lets nothing jump ahead) or no sequences.
func (s *ShortJobs) Fits(seqs [][]int32) bool {
	if s == nil || len(seqs) == 0 || len(seqs) > s.MaxSeqs {
		return false
	}
	total := 0
	for _, q := range seqs {
		if len(q) > s.MaxTokens {
			return false
		}
		total += len(q)
	}
	return total <= s.BatchTokens
}

// Device describes the device a worker computes on, as its /health reports it.
// The llama.cpp engine (backends/llama) describes its device with this type too, so
// a worker reports what its engine found without converting it.
type Device struct {
	// Name is the device: "CPU", "CUDA0", "Metal".
	Name string `json:"name"`
	// Description is the hardware: "NVIDIA H200", "Apple M1", the CPU model.
	Description string `json:"description,omitempty"`
	// Backend is the ggml backend in use: "CPU", "CUDA" or "Metal".
	Backend string `json:"backend"`
	// GPU says the model's layers run on a GPU; GPULayers how many of them (the
	// output layer counted as one), 0 on the CPU.
	GPU       bool `json:"gpu"`
	GPULayers int  `json:"gpu_layers,omitempty"`
	// MemoryTotal and MemoryFree are the device's memory in bytes: on a GPU its
	// driver's figures (every process's allocations counted), on the CPU the
	// host's MemTotal and MemAvailable. /health reads them at the time of the
	// answer; an engine's own description, when it was opened.
	MemoryTotal int64 `json:"memory_total_bytes"`
	MemoryFree  int64 `json:"memory_free_bytes"`
	// Note says why a worker that could have used a GPU runs on the CPU: no
	// backend library in the backend folder, or no device found by those loaded.
	Note string `json:"note,omitempty"`
	// CPUVariant is the build of ggml's CPU kernels the worker runs: a variant
	// library's name ("haswell", "zen4", "sapphirerapids", ...) or "builtin"
	// (backends/cpuvariant). Absent for workers that do not say.
	CPUVariant string `json:"cpu_variant,omitempty"`
	// CPUVariantNote says why those kernels: "the best variant for this CPU",
	// "they use every instruction set of haswell", "as asked (--cpu-variant)".
	CPUVariantNote string `json:"cpu_variant_note,omitempty"`
	// CPUFeatures are the ggml features of those kernels ("AVX2",
	// "AVX512_BF16", ...: cpuvariant.Choice.Features), from which serve decides
	// whether converting F16 weights to BF16 pays (package weights).
	CPUFeatures []string `json:"cpu_features,omitempty"`
	// CPUVendor is the CPU's vendor_id ("GenuineIntel", "AuthenticAMD"; x86
	// only): the same instructions run at different rates on different vendors'
	// cores, which package weights weighs too.
	CPUVendor string `json:"cpu_vendor,omitempty"`
	// CPUAccel names embed-stack's own CPU kernels when they compute part of
	// the model ("embed-stack kernels (AVX-512, BF16)", "(AVX-512, BF16 in
	// FMAs)" on a CPU without AVX512_BF16, "(AVX2, BF16)", with ", AMX" where they
	// multiply in AMX tiles); empty when off (--cpu-accel),
	// on a GPU, or on a CPU without AVX-512F or AVX2 with FMA.
	CPUAccel string `json:"cpu_accel,omitempty"`
	// CPUAccelBF16 says those kernels multiply BF16 weight matrices (repacked at
	// load): with AVX512_BF16 or AVX-512's FMAs, or with AVX2's FMAs on a CPU
	// without AVX-512 ("(AVX2, BF16)"), whatever CPUVariant: then converting F16
	// weights to BF16 pays (package weights).
	CPUAccelBF16 bool `json:"cpu_accel_bf16,omitempty"`
	// Warning says the worker computes more slowly than its CPU allows: the best
	// CPU variant's library was missing or did not load.
	Warning string `json:"warning,omitempty"`
}

// MemoryUsed is the device memory in use, by every process: total less free.
func (d *Device) MemoryUsed() int64 { return max(0, d.MemoryTotal-d.MemoryFree) }

// embedRequest is the body of POST /embed.
type embedRequest struct {
	Tokens [][]int32 `json:"tokens"`
}

// embedResponse is the 200 body of POST /embed: one vector per sequence, in order.
type embedResponse struct {
	Embeddings [][]float32 `json:"embeddings"`
}

// errorResponse is the body of every non-200 answer to /embed. Index is the
// position of the offending sequence in the request, present only for a 400 about
// one sequence.
type errorResponse struct {
	Error string `json:"error"`
	Index *int   `json:"index,omitempty"`
}

// traceparentKey is the context key of the W3C traceparent header value.
type traceparentKey struct{}

// ContextWithTraceparent returns a context carrying a W3C traceparent header value.
// [Client] sends it with every request, and the worker handler puts the header it
// receives into the context given to [Engine.Embed], so the trace context crosses
// the process boundary even before OpenTelemetry is wired in.
func ContextWithTraceparent(ctx context.Context, traceparent string) context.Context {
	return context.WithValue(ctx, traceparentKey{}, traceparent)
}

// TraceparentFromContext returns the traceparent set by [ContextWithTraceparent], or
// "".
func TraceparentFromContext(ctx context.Context) string {
	v, _ := ctx.Value(traceparentKey{}).(string)
	return v
}

// validTraceparent reports whether v has the shape of a W3C traceparent
// (version-traceid-parentid-flags, lowercase hex, ids not all zero). A malformed
// header is ignored rather than refused, as the W3C spec asks of receivers.
func validTraceparent(v string) bool {
	parts := strings.Split(v, "-")
	if len(parts) < 4 || len(parts[0]) != 2 || parts[0] == "ff" {
		return false
	}
	// Version 00 has exactly four fields; later versions may append more.
	if parts[0] == "00" && len(parts) != 4 {
		return false
	}
	for i, n := range []int{2, 32, 16, 2} {
		p := parts[i]
		if len(p) != n {
			return false
		}
		zero := true
		for _, c := range []byte(p) {
			switch {
			case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			default:
				return false
			}
			if c != '0' {
				zero = false
			}
		}
		if zero && (i == 1 || i == 2) {
			return false
		}
	}
	return true
}

package backends

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
)

// Values of WorkerArgs.Task: what a worker returns per sequence.
const (
	// TaskEmbed returns each sequence's last-token hidden state (the default).
	TaskEmbed = "embed"
	// TaskRerank returns the logits of the tokens yes and no at the sequence's last
	// token, for a Qwen3-Reranker: an "embedding" of 2.
	TaskRerank = "rerank"
)

// Defaults of the device flags, spelt as backends/llama spells them (DeviceAuto,
// BackendDirName): this package does not import the cgo package, and a test of
// cmd/embed-stack, which links both, checks that they agree.
const (
	// DefaultDevice is --device's default: the first GPU of a loaded backend, else
	// the CPU.
	DefaultDevice = "auto"
	// BackendDirName is the folder, beside the executable's folder, that GPU
	// backends are loaded from when --backend-dir is not given.
	BackendDirName = "lib/embed-stack"
)

// DeviceArgs are the flags that say where a worker computes: --device, --gpu-layers
// and --backend-dir. serve and embed take them too and pass them on to every worker
// they start; `embed-stack devices` takes them to report that device. Checking a
// device name is the engine's (backends/llama.ParseDevice).
type DeviceArgs struct {
	// Device is auto, cpu, cuda, cuda:N or metal; "" writes no device flags (a
	// worker that picks no ggml device, such as mlx-embed-server).
	Device string
	// GPULayers is how many layers' weights go to the GPU, the output layer
	// counting as one; 0 means all.
	GPULayers int
	// BackendDir is the folder of loadable ggml backends (GPU ones and the CPU
	// kernel variants); "" means BackendDirName beside the executable's folder.
	BackendDir string
	// CPUVariant is the build of ggml's CPU kernels: auto ("" writes no flag),
	// builtin or a variant's name (backends/cpuvariant).
	CPUVariant string
	// CPUAccel is CPUAccelAuto ("" writes no flag) or CPUAccelOff: whether
	// embed-stack's own kernels take the operations ggml's CPU kernels compute
	// slowly (backends/llama's accel.c).
	CPUAccel string
}

// AddFlags defines the device flags on s, bound to d.
func (d *DeviceArgs) AddFlags(s *flagconfig.Set) {
	s.String(&d.Device, "device", "DEVICE", DefaultDevice, "where the model runs: auto (the first GPU of a loaded backend, else the CPU), cpu, cuda, cuda:N or metal").
		More("cpu loads no GPU backend; a GPU asked for by name that is missing is an error, never a fallback to the CPU.")
	s.Int(&d.GPULayers, "gpu-layers", "N", 0, "layers whose weights go to the GPU, the output layer counting as one (0 = all); ignored on the CPU").AtLeast(0)
	s.String(&d.BackendDir, "backend-dir", "DIR", "", "folder of loadable ggml backends: GPU ones such as libggml-cuda.so, and the CPU kernel variants (default: "+BackendDirName+" beside the executable's folder)").
		More("`make cuda` builds the GPU ones, `make cpu-variants` libggml-cpu-NAME.so; bin/embed-stack loads " + BackendDirName + "/. Every GPU backend library in the folder must load.")
	s.String(&d.CPUVariant, "cpu-variant", "BUILD", "", "build of ggml's CPU kernels: auto (the best variant of the backend folder for this CPU; the default), builtin, or a variant such as haswell or zen4").
		More("builtin is the compiled-in kernels; docs/building.md lists the variants. One this CPU lacks an instruction set of is refused at start; a missing or damaged library falls back to the compiled-in kernels with a warning.")
	s.String(&d.CPUAccel, "cpu-accel", "MODE", "", "embed-stack's own CPU kernels for what ggml's compute slowly (an encoder's attention scores, GELU, products with F32 weights and with BF16 weights, and where the CPU has AVX512_BF16 an embedding model's products with Q8_0 weights and a decoder's attention over long inputs): auto (the AVX-512 set where the CPU has AVX-512F, else the AVX2 one where it has AVX2 with FMA; the default), off, or avx512 or avx2 to force one").
		More("They run beside ggml's CPU kernels on a model that runs on the CPU, and keep a copy of F32 weight matrices laid out for them (up to 2 GiB), BF16 ones repacked at load in place of ggml's layout, Q8_0 ones read from the mapped file as they are and converted to BF16 panel by panel as each product runs; on a CPU with AMX-BF16 (Intel's Sapphire Rapids and later) the BF16 products, and the Q8_0 ones above, run in AMX tiles (the environment's EMBED_STACK_AMX=off keeps them on AVX-512). docs/performance.md has their figures. They also leave a decoder's LM head uncomputed: llama.cpp's graph multiplies every output row by the whole vocabulary's matrix, and the engine reads hidden states only. off leaves every operation to ggml.")
}

// Args are the worker flags that carry d: none when d.Device is "".
func (d DeviceArgs) Args() []string {
	if d.Device == "" {
		return nil
	}
	out := []string{"--device", d.Device, "--gpu-layers", strconv.Itoa(d.GPULayers)}
	if d.BackendDir != "" {
		out = append(out, "--backend-dir", d.BackendDir)
	}
	if d.CPUVariant != "" && d.CPUVariant != cpuvariant.Auto {
		out = append(out, "--cpu-variant", d.CPUVariant)
	}
	if d.CPUAccel != "" && d.CPUAccel != CPUAccelAuto {
		out = append(out, "--cpu-accel", d.CPUAccel)
	}
	return out
}

// WorkerArgs is a worker's command line: the flags of `embed-stack worker`, which
// mlx-embed-server takes too (it ignores those that only llama.cpp has, with a
// warning). Args writes it and Parse reads it back, so whoever starts a worker
// (serve and embed for their warm workers, [Ephemeral] adding --ctx, every spawn
// adding --socket) and the worker itself agree on one spelling. Zero fields are left
// out, and the worker takes its default.
type WorkerArgs struct {
	// Model is the GGUF file (mlx-embed-server: the Hugging Face snapshot directory).
	Model string
	// Socket is the Unix socket the worker serves the protocol on; its directory
	// should be private. Every spawn sets it (startProc).
	Socket string
	// Ctx is the context size in tokens: the longest sequence accepted and the
	// packing budget per round. 0: 8192, capped at the model's training context.
	Ctx int
	// Batch is the tokens per decode call of packed short inputs; 0: min(Ctx, 512).
	Batch int
	// Threads are the decode threads; 0: the worker's default for its device.
	Threads int
	// Seqs are the sequences packed into one round; 0: 64.
	Seqs int
	// Buckets are the sequence lengths warmed before the worker reports ready.
	Buckets []int
	// Task is TaskEmbed or TaskRerank; "" means TaskEmbed.
	Task string
	// Pooling is how an embedding is pooled from the token states: "mean", "cls"
	// or "last"; "" means what the model's GGUF declares (last-token when it
	// declares none).
	Pooling string
	// Nice lowers the decoding threads' CPU priority (0-19).
	Nice int
	// ReleaseKV, when positive, hands the KV cache of the inputs over 512 tokens
	// back to the OS once the worker has had no work for this long
	// (llama.Config.IdleRelease); 0 keeps it. llama.cpp's worker only.
	ReleaseKV time.Duration
	// IgnoreStdin keeps the worker running when its stdin reaches EOF, which by
	// default stops it so that it dies with its parent.
	IgnoreStdin bool
	// LogFormat and LogLevel are the worker's logging; "" is its default (text,
	// info).
	LogFormat, LogLevel string
	// DeviceArgs say where it computes.
	DeviceArgs
}

// Args returns the command line that Parse reads back as a, without the program
// name or subcommand word. The flags come in a fixed order (the model first, the
// socket last), so that a command line in a log reads the same every time.
func (a WorkerArgs) Args() []string {
	var out []string
	str := func(name, v string) {
		if v != "" {
			out = append(out, name, v)
		}
	}
	num := func(name string, v int) {
		if v > 0 {
			out = append(out, name, strconv.Itoa(v))
		}
	}
	str("--model", a.Model)
	num("--threads", a.Threads)
	str("--log-format", a.LogFormat)
	str("--log-level", a.LogLevel)
	out = append(out, a.DeviceArgs.Args()...)
	if a.Task != TaskEmbed {
		str("--task", a.Task)
	}
	str("--pooling", a.Pooling)
	num("--ctx", a.Ctx)
	num("--batch", a.Batch)
	str("--buckets", JoinLengths(a.Buckets))
	num("--seqs", a.Seqs)
	num("--nice", a.Nice)
	if a.ReleaseKV > 0 {
		out = append(out, "--release-kv", flagconfig.FormatDuration(a.ReleaseKV))
	}
	if a.IgnoreStdin {
		out = append(out, "--ignore-stdin")
	}
	str("--socket", a.Socket)
	return out
}

// Parse reads a worker's command line (what follows the word "worker"; Args writes
// it) into a. Fields the command line leaves out take the flags' defaults. Its
// errors are flagconfig's (flagconfig.Report words them), and those of check.
func (a *WorkerArgs) Parse(args []string) error {
	s := flagconfig.New("embed-stack worker", "embed-stack worker --model PATH --socket PATH [flags]",
		"Loads a GGUF through llama.cpp and embeds token-id sequences sent over the worker\n"+
			"protocol (docs/architecture.md). Started by `embed-stack serve`.")
	var buckets string
	s.String(&a.Model, "model", "PATH", "", "the GGUF file (required)")
	s.String(&a.Socket, "socket", "PATH", "", "Unix socket to serve the worker protocol on (required; its directory should be private)")
	s.Int(&a.Ctx, "ctx", "TOKENS", 0, "context size: the longest sequence accepted and the packing budget per round (0 = 8192, capped at the model's training context)")
	s.Int(&a.Batch, "batch", "TOKENS", 0, "tokens per llama.cpp decode call of packed short inputs (n_batch = n_ubatch; 0 = min(ctx, 512)); a long input's calls take at most 256 of them, fewer where their attention scores would pass 512 MiB")
	s.Int(&a.Threads, "threads", "N", 0, "llama.cpp decode threads (0 = number of CPUs)")
	s.Int(&a.Seqs, "seqs", "N", 0, "sequences packed into one round (0 = 64, at most 256)")
	s.String(&buckets, "buckets", "N,N,...", "", "sequence lengths warmed at start: before the worker reports ready, each llama.cpp context that embeds inputs of such a length decodes one short throwaway input, so that the first request of any size is as fast as later ones")
	s.String(&a.Task, "task", "TASK", TaskEmbed, "embed: return each sequence's last-token hidden state; rerank: the logits of the tokens yes and no at its last token, for a Qwen3-Reranker")
	s.String(&a.Pooling, "pooling", "MODE", "", "how a sequence's vector is pooled from its token states: mean, cls (the first token's) or last (the last token's); default: the model's GGUF pooling_type, last-token when it declares none (serve passes the model's)")
	s.Int(&a.Nice, "nice", "N", 0, "lower the decoding threads' CPU priority by N (0-19); serve starts ephemeral workers at 10")
	s.Duration(&a.ReleaseKV, "release-kv", "DURATION", 0, "hand the KV cache of the inputs over 512 tokens back to the OS after this long without work (0 = never); serve passes --warm-release-kv").AtLeast(0)
	s.Bool(&a.IgnoreStdin, "ignore-stdin", false, "keep running when stdin reaches EOF (by default EOF on stdin stops the worker, so it dies with its parent)")
	s.String(&a.LogFormat, "log-format", "FORMAT", "text", "log format: text or json")
	s.String(&a.LogLevel, "log-level", "LEVEL", "info", "log level: debug, info, warn or error")
	a.DeviceArgs.AddFlags(s)
	if err := s.Parse(args, nil); err != nil {
		return err
	}
	return a.check(buckets)
}

// check refuses what the flag package cannot, and reads --buckets.
func (a *WorkerArgs) check(buckets string) error {
	if a.Model == "" || a.Socket == "" {
		return errors.New("--model and --socket are required")
	}
	if a.Task != TaskEmbed && a.Task != TaskRerank {
		return fmt.Errorf("--task %q is not one of %s, %s", a.Task, TaskEmbed, TaskRerank)
	}
	switch a.Pooling {
	case "", "mean", "cls", "last":
	default:
		return fmt.Errorf("--pooling %q is not one of mean, cls, last", a.Pooling)
	}
	var err error
	if a.Buckets, err = ParseLengths(buckets); err != nil {
		return fmt.Errorf("--buckets: %w", err)
	}
	return nil
}

// ParseLengths reads a comma-separated list of token counts (serve's
// --warm-buckets, a worker's --buckets): positive, returned sorted without
// repeats; "" is none.
func ParseLengths(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number of tokens", f)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// JoinLengths writes lengths as ParseLengths reads them.
func JoinLengths(lengths []int) string {
	s := make([]string, len(lengths))
	for i, n := range lengths {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// Values of DeviceArgs.CPUAccel and backends/llama's Config.CPUAccel.
const (
	// CPUAccelAuto uses embed-stack's own CPU kernels where the CPU can run them:
	// the AVX-512 set where it has AVX-512F, else the AVX2 one where it has AVX2
	// and FMA.
	CPUAccelAuto = "auto"
	// CPUAccelOff leaves every operation to ggml's CPU kernels.
	CPUAccelOff = "off"
	// CPUAccelAVX512 and CPUAccelAVX2 force one kernel set, for tests and
	// measurements (the AVX2 set on an AVX-512 CPU); a CPU without its
	// instructions is refused.
	CPUAccelAVX512 = "avx512"
	CPUAccelAVX2   = "avx2"
)

// CheckCPUAccel refuses a --cpu-accel value other than auto, off, avx512, avx2
// or "" (auto), and a kernel set the CPU h lacks an instruction of, naming it.
func CheckCPUAccel(h cpuvariant.Host, v string) error {
	var need []string
	switch v {
	case "", CPUAccelAuto, CPUAccelOff:
		return nil
	case CPUAccelAVX512:
		need = []string{"avx512f"}
	case CPUAccelAVX2:
		need = []string{"avx2", "fma"}
	default:
		return fmt.Errorf("%q is not auto, off, avx512 or avx2", v)
	}
	if h.Arch != "amd64" {
		return fmt.Errorf("%s: embed-stack's CPU kernels are x86-64 ones; this binary is for %s", v, h.Arch)
	}
	for _, f := range need {
		if !h.Flags[f] {
			return fmt.Errorf("%s: this CPU lacks %s (not in /proc/cpuinfo's flags)", v, strings.ToUpper(f))
		}
	}
	return nil
}

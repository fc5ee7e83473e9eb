package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/bench/peers"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/weights"
)

// Flags are `embed-stack bench`'s settings. The command registers them
// (NewFlagSet) and parses its command line into them (Parse); Session turns them
// into the run. They live here, beside the Plan most of them fill, so that the
// command only wires: the one setting it reads itself is how to open the floor
// (Model, Threads, CPUVariant, CPUAccel, Weights, WeightsCache, Floor), which
// needs llama.cpp.
type Flags struct {
	Model, CPUVariant, LogLevel string
	CPUAccel                    string
	Threads                     int
	// Weights is --weights (package weights' modes) and WeightsCache
	// --weights-cache, for the floor and the embed-stack serve the harness starts;
	// the command fills WeightsCache's default before Session.
	Weights, WeightsCache           string
	Floor, Quick                    bool
	corpus, url, ollama, ollamaHome string
	stModel, stPython, stScript     string
	jsonOut, mdOut                  string
	pid, ollamaNumCtx, warmContext  int
	cacheMiB                        int
	serve                           bool
	serveArgs, peerSpecs            []string
	minCosine                       float64
	idleSettle                      time.Duration
	inFlightTokens                  string
	plan                            Plan
	batches, lengths, jobs          string
	skip, only                      string
}

// NewFlagSet defines bench's flags, bound to f, in --help's order.
func NewFlagSet(f *Flags) *flagconfig.Set {
	s := flagconfig.New("embed-stack bench", "embed-stack bench --model PATH [flags]",
		"Benchmarks embed-stack against the engine floor and peer servers on the same GGUF and\n"+
			"texts, and prints a Markdown table (docs/performance.md explains it).")
	s.Group("Essentials")
	s.String(&f.Model, "model", "PATH", "", "the GGUF model (required): the floor loads it, the servers the harness starts serve it, and its tokenizer cuts the texts")
	s.String(&f.corpus, "corpus", "FILE", "", "text file the inputs are cut from (default: "+CorpusFile+" of the repository above the working directory)")
	s.Bool(&f.Quick, "quick", false, "a run of seconds on a tiny model (what CI runs): 1 repetition, small grid, 1s per concurrency level; explicit flags still apply")
	s.String(&f.jsonOut, "json", "FILE", "", "write the report as JSON to this file")
	s.String(&f.mdOut, "markdown", "FILE", "", "write the table to this file too (it always goes to stdout)")
	s.Group("Targets")
	s.Int(&f.Threads, "threads", "N", 0, "llama.cpp threads for the floor and every server the harness starts (0 = number of CPUs)")
	s.Bool(&f.Floor, "floor", true, "run the engine floor: the same token ids through llama.cpp in this process, no HTTP, no worker")
	s.Bool(&f.serve, "serve", true, "start `embed-stack serve` (this executable) on the model and benchmark it (unless --url is given)")
	s.String(&f.url, "url", "URL", "", "benchmark an embed-stack already running at this OpenAI base URL (e.g. http://127.0.0.1:8080/v1) instead of starting one")
	s.Int(&f.pid, "pid", "PID", 0, "with --url: the server's pid, to sample its process tree's memory")
	s.List(&f.serveArgs, "serve-arg", "FLAG", "extra flag for the embed-stack serve the harness starts (repeatable, e.g. --serve-arg=--decode-tokens=2048)")
	s.String(&f.ollama, "ollama", "PATH", "", "ollama executable (bin/ollama from `make bench-peers`): start it on the same GGUF and compare")
	s.String(&f.ollamaHome, "ollama-home", "DIR", ".cache/bench/ollama", "directory for Ollama's private store and keys, kept between runs")
	s.Int(&f.ollamaNumCtx, "ollama-num-ctx", "N", 0, "Ollama's num_ctx (0 = the smallest power of two holding --long-tokens, so that it embeds the long input instead of truncating it)")
	s.String(&f.stModel, "sentence-transformers", "DIR", "", "start sentence-transformers on torch's CPU backend ("+peers.STServerScript+") on this checkpoint folder, the original of the GGUF, and compare")
	s.String(&f.stPython, "st-python", "PATH", ".cache/venv-st/bin/python", "the Python that runs it, with torch and sentence-transformers (`make bench-st`)")
	s.List(&f.peerSpecs, "peer", "NAME=URL[,model=NAME][,pid=PID]", "another OpenAI-compatible server (repeatable); its vectors are checked before it is timed")
	s.Float(&f.minCosine, "min-cosine", "X", DefaultMinCosine, "cosine each target's vectors must reach against the floor's before it is timed")
	s.Duration(&f.idleSettle, "idle-settle", "DURATION", 5*time.Second, "time the servers are left idle after the vector checks before their idle memory is read (serve hands its heap's free pages back after 2 to 4 idle seconds)")
	s.Int(&f.warmContext, "warm-context", "TOKENS", 8192, "the warm worker's context, for the memory goal (serve's --warm-max-tokens)")
	s.String(&f.CPUVariant, "cpu-variant", "BUILD", "", "build of ggml's CPU kernels for the floor and the embed-stack serve the harness starts (serve's --cpu-variant: auto, builtin or a variant such as haswell; default auto)")
	s.String(&f.Weights, "weights", "MODE", weights.Auto, "weights the floor and the embed-stack serve the harness starts compute with: auto (serve's default, what a user runs: since 2026-12-04; runs before it used file), file or bf16 (serve's --weights, docs/performance.md); the report's host line names the floor's, and --serve-arg=--weights=MODE changes the served model's alone")
	s.String(&f.WeightsCache, "weights-cache", "DIR", "", "folder of the weight files converted at load, for the floor and that serve alike (serve's --weights-cache; default EMBED_STACK_WEIGHTS_CACHE, else serve's default beside the Hugging Face cache)")
	s.String(&f.CPUAccel, "cpu-accel", "MODE", "", "embed-stack's own CPU kernels for the floor and the embed-stack serve the harness starts (serve's --cpu-accel: auto or off; default auto)")
	s.String(&f.LogLevel, "log-level", "LEVEL", "warn", "log level of this process: debug shows llama.cpp's own lines for the floor (buffer sizes, kernels)")
	s.Group("Shapes")
	p := &f.plan
	s.Int(&p.ShortTokens, "short-tokens", "TOKENS", 100, "the seed's short query")
	s.Int(&p.MediumTokens, "medium-tokens", "TOKENS", 1024, "each of the seed's two documents")
	s.Int(&p.LongTokens, "long-tokens", "TOKENS", 15000, "the seed's long document and the input in flight")
	s.Int(&p.OverLimitTokens, "over-limit-tokens", "TOKENS", 32769, "a document over the server's limit (must get 400)")
	s.String(&f.batches, "batches", "N,N,...", "1,8,32", "grid batch sizes")
	s.String(&f.lengths, "lengths", "N,N,...", "16,128,512,2048", "grid sequence lengths in tokens")
	s.Int(&p.MaxGridTokens, "max-grid-tokens", "TOKENS", 16384, "skip grid cells of more tokens per request (0 = none)")
	s.Int(&p.QueryTokens, "query-tokens", "TOKENS", 32, "the concurrency and in-flight shapes' queries")
	s.String(&f.jobs, "clients", "N,N,...", "1,4,16", "concurrency levels")
	s.Duration(&p.ClientDuration, "client-duration", "DURATION", 10*time.Second, "time per concurrency level and repetition")
	s.Int(&p.Warmup, "warmup", "N", 1, "warm-up requests per request shape")
	s.Int(&p.Reps, "reps", "N", 3, "timed repetitions per request shape")
	s.Int(&p.HeavyReps, "heavy-reps", "N", 1, "repetitions of shapes of --heavy-tokens or more (which get no warm-up)")
	s.Int(&p.HeavyTokens, "heavy-tokens", "TOKENS", 2048, "request size from which --heavy-reps applies")
	s.Int(&p.ClientReps, "client-reps", "N", 1, "repetitions of each concurrency level")
	s.Int(&p.InFlightIdle, "in-flight-idle", "N", 10, "idle queries timed before the long input starts")
	s.Duration(&p.InFlightWindow, "in-flight-window", "DURATION", 15*time.Second, "longest time queries run beside the long input (it is cancelled after)")
	s.String(&f.inFlightTokens, "in-flight-tokens", "N,N,...", "4000,8000", "lengths in tokens of further in-flight shapes' documents (in-flight/N), under the warm limit so the warm worker embeds them beside the queries; \"\" = none")
	s.Bool(&p.Reindex, "reindex", false, "add the re-index shape (reindex; also run by --only reindex): a second embed-stack serve with --cache-size is primed with the documents seen before, then it and the others embed the whole corpus, timed, and their vectors are compared bit for bit")
	s.Int(&p.ReindexDocs, "reindex-docs", "N", 1000, "the re-index shape's documents")
	s.Int(&p.ReindexTokens, "reindex-tokens", "TOKENS", 64, "the length of each of its documents")
	s.Int(&p.ReindexSeenPercent, "reindex-seen", "PERCENT", 80, "the share of its documents embedded before, in the untimed priming pass")
	s.Int(&p.ReindexBatch, "reindex-batch", "N", 100, "documents per request of the re-index shape")
	s.Int(&f.cacheMiB, "reindex-cache-size", "MiB", 256, "the --cache-size of the second embed-stack serve the re-index shape starts")
	s.String(&f.skip, "skip", "IDS", "", "comma-separated shape IDs to leave out (e.g. seed/long,in-flight)")
	s.String(&f.only, "only", "IDS", "", "comma-separated shape IDs to run, and no other (e.g. seed/short,grid/32x512)")
	return s
}

// quickDefaults are --quick's settings, applied to flags not given explicitly. The
// server it starts gets small limits (quickServeArgs) so that a long input of 1024
// tokens already takes the ephemeral path and 2049 tokens are over the limit: every
// path runs, in seconds.
var quickDefaults = map[string]string{
	"batches": "1,8", "lengths": "16,128", "clients": "1,4", "client-duration": "1s",
	"warmup": "0", "reps": "1", "in-flight-idle": "3", "in-flight-window": "2s", "in-flight-tokens": "400",
	"short-tokens": "64", "medium-tokens": "256", "long-tokens": "1024", "over-limit-tokens": "2049",
	"warm-context": "512", "idle-settle": "0s",
	// One thread: ggml's threads spin at their barriers, and on a shared CI machine
	// a descheduled partner makes every decode call wait out a time slice.
	"threads": "1",
}

var quickServeArgs = []string{"--warm-max-tokens=512", "--max-input-tokens=2048"}

// servePrompts goes first among the flags of the embed-stack serve the harness
// starts: every Input's Text is already in the model's prompts (Corpus wraps it,
// a query in the query prompt, as the server would), and every target is sent it
// as it is. A serve that applied its own convention on top would embed a
// document of an E5 model as "passage: passage: ..." and a query as
// "passage: query: ...", tokens the floor and the other servers never see, and
// the vector check would refuse it for the token count.
const servePrompts = "--prompts=none"

// Parse reads a command line into f through s (NewFlagSet(f)): the flags, then
// --quick's defaults for the flags not given, then the checks.
func (f *Flags) Parse(s *flagconfig.Set, args []string) error {
	if err := s.Parse(args, nil); err != nil {
		return err
	}
	if f.Quick {
		for name, v := range quickDefaults {
			if s.Source(name) != flagconfig.FromFlag {
				if err := s.Set(name, v); err != nil {
					panic(err) // quickDefaults names flags of this set
				}
			}
		}
		if s.Source("serve-arg") != flagconfig.FromFlag {
			f.serveArgs = quickServeArgs
		}
	}
	return f.finish()
}

// finish checks the flags and fills what depends on others.
func (f *Flags) finish() error {
	if f.Model == "" {
		return errors.New("--model is required: the GGUF to benchmark (e.g. models/qwen3-0.6b-f16.gguf from `make bench-model`)")
	}
	if f.Threads == 0 {
		f.Threads = runtime.NumCPU()
	}
	var err error
	if f.plan.Batches, err = intList("--batches", f.batches); err != nil {
		return err
	}
	if f.plan.Lengths, err = intList("--lengths", f.lengths); err != nil {
		return err
	}
	if f.plan.Clients, err = intList("--clients", f.jobs); err != nil {
		return err
	}
	f.plan.InFlightTokens = []int{}
	if f.inFlightTokens != "" {
		if f.plan.InFlightTokens, err = intList("--in-flight-tokens", f.inFlightTokens); err != nil {
			return err
		}
	}
	if f.skip != "" {
		f.plan.Skip = strings.Split(f.skip, ",")
	}
	if f.only != "" {
		f.plan.Only = strings.Split(f.only, ",")
	}
	if f.Weights, err = weights.ParseMode(f.Weights); err != nil {
		return fmt.Errorf("--weights: %w", err)
	}
	if f.cacheMiB < 1 {
		return fmt.Errorf("--reindex-cache-size %d: give the cache of the re-index shape's second server in MiB, at least 1", f.cacheMiB)
	}
	if f.pid != 0 && f.url == "" {
		return errors.New("--pid goes with --url (the harness knows the pid of a server it starts)")
	}
	if f.stModel != "" {
		root, err := findRepoRoot()
		if err != nil {
			return fmt.Errorf("--sentence-transformers runs %s of the repository, and %w", peers.STServerScript, err)
		}
		f.stScript = filepath.Join(root, peers.STServerScript)
	}
	if f.corpus == "" {
		root, err := findRepoRoot()
		if err != nil {
			return fmt.Errorf("--corpus not given and %w", err)
		}
		f.corpus = filepath.Join(root, CorpusFile)
	}
	return nil
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s %q: give positive integers separated by commas", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// findRepoRoot walks up from the working directory to the one holding the corpus.
func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, CorpusFile)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s above the working directory; give --corpus", CorpusFile)
		}
		dir = parent
	}
}

// Session is the run the flags describe, but for its Floor, which the caller
// opens (it needs llama.cpp, which this package does not import); args is the
// command line, for the report. A malformed --peer is an error of the run, as it
// was before the session existed.
func (f *Flags) Session(args []string, stderr io.Writer) (*Session, error) {
	s := &Session{Model: f.Model, Corpus: f.corpus, Plan: f.plan, URL: f.url, PID: f.pid,
		CacheMiB: f.cacheMiB, MinCosine: f.minCosine, IdleSettle: f.idleSettle, Goals: GoalSpec{WarmContext: f.warmContext},
		Command: "embed-stack bench " + strings.Join(args, " "), Log: stderr}
	for _, spec := range f.peerSpecs {
		p, err := ParsePeer(spec)
		if err != nil {
			return nil, err
		}
		s.Peers = append(s.Peers, p)
	}
	if f.serve && f.url == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this executable to start serve: %w", err)
		}
		args := append([]string{servePrompts}, serveWeights(f.Weights, f.WeightsCache, f.serveArgs)...)
		args = append(args, f.serveArgs...)
		if f.CPUVariant != "" {
			args = append(args, "--cpu-variant="+f.CPUVariant)
		}
		if f.CPUAccel != "" {
			args = append(args, "--cpu-accel="+f.CPUAccel)
		}
		s.Serve = &peers.EmbedStack{Bin: exe, Model: f.Model, Threads: f.Threads, Args: args}
	}
	if f.stModel != "" {
		s.SentenceTransformers = &peers.SentenceTransformers{Python: f.stPython, Script: f.stScript, Model: f.stModel, Threads: f.Threads}
	}
	if f.ollama != "" {
		s.Ollama = &peers.Ollama{Bin: f.ollama, Model: f.Model, Home: f.ollamaHome, Threads: f.Threads, NumCtx: f.ollamaNumCtx}
	}
	return s, nil
}

// serveWeights are the served model's --weights and --weights-cache: the floor's
// (--weights, --weights-cache), so that the vector check holds it to the floor's
// vectors and its ratio to the floor is the server's cost, not a difference of
// weights; each is left out where a --serve-arg gives its own.
func serveWeights(mode, cache string, serveArgs []string) []string {
	gives := func(name string) bool {
		return slices.ContainsFunc(serveArgs, func(a string) bool { return a == name || strings.HasPrefix(a, name+"=") })
	}
	var args []string
	if !gives("--weights") {
		args = append(args, "--weights="+mode)
	}
	if cache != "" && !gives("--weights-cache") {
		args = append(args, "--weights-cache="+cache)
	}
	return args
}

// WriteReport writes rep's table to stdout, and to the --markdown and --json
// files when they are set.
func (f *Flags) WriteReport(rep *Report, stdout io.Writer) error {
	err := rep.Table(stdout)
	if err == nil && f.mdOut != "" {
		err = writeFile(f.mdOut, rep.Table)
	}
	if err == nil && f.jsonOut != "" {
		err = writeFile(f.jsonOut, rep.WriteJSON)
	}
	return err
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

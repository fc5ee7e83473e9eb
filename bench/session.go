package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/bench/peers"
	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/tokenizer"
	"github.com/embed-stack/embed-stack/weights"
)

// Session is one run of `embed-stack bench`: the model and the corpus its inputs
// are cut from, the plan, and the contenders, of which it starts those that are
// processes (bench/peers) and stops them before Run returns.
type Session struct {
	// Model is the GGUF every contender serves; its tokenizer cuts the corpus.
	Model string
	// Corpus is the text file inputs are cut from (CorpusFile in the repository).
	Corpus string
	Plan   Plan

	// Ours is embed-stack: already running at URL (with PID, to sample its
	// memory), or started by Serve when URL is "" and Serve is set.
	URL   string
	PID   int
	Serve *peers.EmbedStack
	// CacheMiB is the cache of the second embed-stack the re-index shape needs
	// (Plan.HasReindex): a copy of Serve with serve --cache-size CacheMiB (0: 256),
	// named "embed-stack+cache", which runs that shape only.
	CacheMiB int
	// Ollama, when set, is started on the same GGUF; NumCtx 0 is OllamaNumCtx.
	Ollama *peers.Ollama
	// SentenceTransformers, when set, is started on the checkpoint the GGUF was
	// converted from.
	SentenceTransformers *peers.SentenceTransformers
	// Peers are other servers, already running.
	Peers []Peer

	// Floor, when set, opens the engine floor with a context of ctxTokens
	// (FloorContext): the same token ids through llama.cpp in this process. It is
	// called after the servers have started, so that their cold start is measured
	// as a user's would be, with no engine of this process holding the model and
	// its context's memory (docs/performance.md, "Cold start"). about describes it
	// for the report; close releases it. ctx bounds what opening it waits for (a
	// conversion of its weights another process is making).
	Floor func(ctx context.Context, ctxTokens int) (e Embedder, about string, close func(), err error)
	// CPUKernels names the build of ggml's CPU kernels the floor runs ("haswell",
	// "builtin"; backends/cpuvariant), and Weights the weights it computes with
	// (package weights: the file's, or converted at load), for the report's host
	// line; Floor sets them when it opens the engine.
	CPUKernels string
	Weights    weights.Result

	// MinCosine is the vector check's threshold (0: DefaultMinCosine); Goals
	// configures the report's goals.
	MinCosine float64
	// IdleSettle is how long the servers are left idle after the vector checks
	// before their idle memory is read (Runner.IdleSettle).
	IdleSettle time.Duration
	Goals      GoalSpec
	// Command is the command line, for the report.
	Command string
	// Log receives the progress lines.
	Log io.Writer
}

// Peer is another OpenAI-compatible server, from --peer name=URL[,model=NAME][,pid=PID].
type Peer struct {
	Name, URL, Model string
	// PID is its process, to sample its memory (0: not measured).
	PID int
}

// ParsePeer reads a --peer value; the model name defaults to "bench".
func ParsePeer(s string) (Peer, error) {
	name, rest, ok := strings.Cut(s, "=")
	parts := strings.Split(rest, ",")
	if !ok || name == "" || parts[0] == "" {
		return Peer{}, fmt.Errorf("--peer %q: use name=URL[,model=NAME][,pid=PID]", s)
	}
	p := Peer{Name: name, URL: parts[0], Model: "bench"}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "model":
			p.Model = v
		case "pid":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return Peer{}, fmt.Errorf("--peer %q: pid %q is not a process id", s, v)
			}
			p.PID = n
		default:
			return Peer{}, fmt.Errorf("--peer %q: unknown option %q (model= or pid=)", s, k)
		}
	}
	return p, nil
}

// FloorContext is the floor's context for a plan: one context holds the longest
// input, sized as the long path sizes an ephemeral worker's (a multiple of 64, at
// least 8192), but no more than the model's training context (0: unknown).
func FloorContext(longTokens, modelContext int) int {
	n := (max(longTokens, 8192) + 63) / 64 * 64
	if modelContext > 0 {
		n = min(n, modelContext)
	}
	return n
}

// OllamaNumCtx is Ollama's num_ctx for a plan: the smallest power of two from 4096
// that holds the long input, so that Ollama embeds it rather than truncating it.
func OllamaNumCtx(longTokens int) int {
	n := 4096
	for n < longTokens {
		n *= 2
	}
	return n
}

// CheckInputs are the vector check's texts: a query and documents of growing
// length, long enough that a different attention or pooling shows, up to
// maxTokens (the model's longest input; 0: no limit).
func CheckInputs(c *Corpus, maxTokens int) ([]Input, error) {
	q, err := c.Query(40)
	if err != nil {
		return nil, err
	}
	in := []Input{q}
	for _, n := range []int{128, 512, 2048} {
		if maxTokens > 0 && n > maxTokens {
			break
		}
		d, err := c.Document(n)
		if err != nil {
			return nil, err
		}
		in = append(in, d)
	}
	return in, nil
}

// Run sets the contenders up, runs the plan and evaluates the goals.
func (s *Session) Run(ctx context.Context) (*Report, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(s.Log, "bench: "+format+"\n", a...) }
	model, err := ReadModel(s.Model)
	if err != nil {
		return nil, err
	}
	facts, err := modelinfo.Read(s.Model, modelinfo.Options{})
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromGGUF(s.Model)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	frame, err := facts.Frame(tok)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", s.Model, err)
	}
	text, err := os.ReadFile(s.Corpus)
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	corpus, err := NewModelCorpus(tok, string(text), modelPrompts(facts.Prompts), frame)
	if err != nil {
		return nil, err
	}
	shapes, err := s.Plan.Shapes(corpus)
	if err != nil {
		return nil, err
	}
	checks, err := CheckInputs(corpus, facts.MaxTokens)
	if err != nil {
		return nil, err
	}
	logf("%d shapes from a corpus of %d tokens; model %s (%.3g parameters)", len(shapes), corpus.Tokens(), filepath.Base(s.Model), float64(model.Params))

	client := NewClient()
	var contenders []*Contender
	var procs []*peers.Process
	defer func() {
		for _, p := range procs {
			if err := p.Stop(); err != nil {
				logf("%v", err)
			}
		}
	}()
	// launch starts a server the harness runs and adds it to the contenders.
	launch := func(role Role, start func(context.Context) (*peers.Process, error)) error {
		p, err := start(ctx)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		contenders = append(contenders, serverContender(p, role, client))
		return nil
	}
	switch {
	case s.URL != "":
		contenders = append(contenders, &Contender{
			Name: "embed-stack", Role: RoleOurs, PID: s.PID, About: "embed-stack at " + s.URL,
			Target: &Server{BaseURL: s.URL, Model: "bench", Client: client},
		})
	case s.Serve != nil:
		logf("starting embed-stack serve")
		if err := launch(RoleOurs, s.Serve.Start); err != nil {
			return nil, err
		}
		if s.Plan.HasReindex() {
			cached := *s.Serve
			cached.CacheMiB = orInt(s.CacheMiB, 256)
			logf("starting embed-stack serve --cache-size %d for the re-index shape", cached.CacheMiB)
			p, err := cached.Start(ctx)
			if err != nil {
				return nil, err
			}
			procs = append(procs, p)
			c := serverContender(p, RoleOurs, client)
			c.Name, c.CacheMiB = CachedName, cached.CacheMiB
			contenders = append(contenders, c)
		}
	}
	if s.URL != "" && s.Plan.HasReindex() {
		logf("the re-index shape runs without a cached server: the harness starts one only beside the embed-stack it starts (no --url)")
	}
	if s.Ollama != nil {
		o := *s.Ollama
		if o.NumCtx == 0 {
			o.NumCtx = OllamaNumCtx(s.Plan.LongTokens)
		}
		logf("starting ollama (the first run copies the model into %s)", o.Home)
		if err := launch(RolePeer, o.Start); err != nil {
			return nil, err
		}
	}
	if s.SentenceTransformers != nil {
		logf("starting sentence-transformers (importing torch takes a while)")
		if err := launch(RolePeer, s.SentenceTransformers.Start); err != nil {
			return nil, err
		}
	}
	for _, p := range s.Peers {
		contenders = append(contenders, &Contender{
			Name: p.Name, Role: RolePeer, PID: p.PID, About: p.URL,
			Target: &Server{BaseURL: p.URL, Model: p.Model, Client: client},
		})
	}
	if s.Floor != nil {
		eng, about, closeFloor, err := s.Floor(ctx, FloorContext(s.Plan.LongTokens, model.Context))
		if err != nil {
			return nil, fmt.Errorf("floor: %w", err)
		}
		defer closeFloor()
		contenders = append([]*Contender{{Name: "floor", Role: RoleFloor, Target: &Floor{Engine: eng}, About: about}}, contenders...)
	}

	r := &Runner{Contenders: contenders, Shapes: shapes, Checks: checks, MinCosine: s.MinCosine, IdleSettle: s.IdleSettle, Model: &model, Log: s.Log, CPUKernels: s.CPUKernels, Weights: s.Weights}
	rep, err := r.Run(ctx)
	if err != nil {
		return nil, err
	}
	rep.Command = s.Command
	rep.Goals = Goals(rep, s.Goals)
	return rep, nil
}

// CachedName is the contender name of the embed-stack started with its cache on.
const CachedName = "embed-stack+cache"

// modelPrompts is a family's prompt convention as routing writes it.
func modelPrompts(p family.Prompts) routing.Prompts {
	return routing.Prompts{Family: p.Name, Query: p.Query, Instruction: p.Instruction, Document: p.Document}
}

func serverContender(p *peers.Process, role Role, client *http.Client) *Contender {
	return &Contender{
		Name: p.Name, Role: role, PID: p.PID, About: p.About, ColdStart: p.ColdStart,
		Target: &Server{BaseURL: p.BaseURL, Model: p.Model, Client: client},
	}
}

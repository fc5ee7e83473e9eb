// Package served is the set of models one `embed-stack serve` process serves
// (issue 17: several models behind one address), as ollama's server/sched.go is a
// library scheduler its command configures: each --model entry parsed and named
// (Entry), made ready to run (package modelrun), given a router with the server's
// limits and a warm worker run on demand (backends.OnDemand: --keep-alive, the hang
// watch), its ephemeral workers sized with every model's warm worker counted, and
// the warm workers run as one fleet (backends.Fleet). It describes the models to
// package server (Models.Registry, Info, Loaded) and to the worker gauges
// (WarmModels).
//
// It refuses to know about HTTP handling, flags' parsing beyond the per-model
// values' syntax, and cgo.
package served

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/modelrun"
	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/server"
	"github.com/embed-stack/embed-stack/telemetry"
	"github.com/embed-stack/embed-stack/weights"
)

// Config is what the command gives Load. The zero value of each field is
// documented.
type Config struct {
	// Entries are the models, in --model order: the first is the default.
	Entries []Entry
	// Model is every model's configuration but its Model and the entry's own
	// settings (pooling, prompts), which Load fills in.
	Model modelrun.Config
	// Routing is the routing configuration every model shares (limits, batching,
	// defaults); Load fills in each model's name and ephemeral bounds.
	Routing routing.Config
	// CacheBytes bounds the exact embedding cache all models share
	// (routing.Cache); 0 = no cache.
	CacheBytes int64
	// HangTimeout is --worker-hang-timeout: a warm worker that answers none of
	// its requests for this long is killed and restarted, and an ephemeral one
	// that answers no health probe is killed; 0 = never.
	HangTimeout time.Duration
	// Warm is the warm worker's program (--warm-backend), resolved.
	Warm backends.WarmProgram
	// EphemeralQueue is --ephemeral-queue as given, for the log line.
	EphemeralQueue int
}

// Model is one served model: its entry and name, what modelrun prepared, its
// router, warm worker and ephemeral admission bounds.
type Model struct {
	Entry Entry
	// Name is what requests give as "model": the entry's NAME, else the GGUF's
	// general.name as a slug.
	Name     string
	Run      *modelrun.Model
	Capacity backends.Capacity
	Router   *routing.Router
	Warm     *backends.OnDemand
	// File is what the Ollama and TEI APIs report of the GGUF; its digest is
	// also the router's cache identity.
	File server.ModelFile
}

// Models are serve's models in --model order (the first is the default), and
// their warm workers as one fleet. Start and Close run the fleet.
type Models struct {
	List  []*Model
	Fleet backends.Fleet
	// warmMax is --warm-max-tokens, for Start's message.
	warmMax int
}

// Load prepares every entry (modelrun.Prepare: resolve, read the GGUF and its
// tokenizer; nothing is started), refuses names given twice, sizes each model's
// ephemeral workers with every model's warm worker counted
// (backends.CapacityConfig.Warm), and gives each a router with the limits and its
// warm worker, run on demand (Entry.KeepAlive) and watched for hangs.
func Load(ctx context.Context, cfg Config, logger *slog.Logger) (*Models, error) {
	models := &Models{warmMax: cfg.Model.WarmMaxTokens}
	several := len(cfg.Entries) > 1
	names := make([]string, 0, len(cfg.Entries))
	for _, e := range cfg.Entries {
		mc := cfg.Model
		mc.Model = e.Ref
		mc.Pooling, mc.Prompts = e.Pooling, e.Prompts
		mc.QueryPrompt, mc.DocumentPrompt = e.QueryPrompt, e.DocumentPrompt
		if e.Weights != "" {
			mc.Weights = e.Weights
		}
		run, err := modelrun.Prepare(ctx, mc, logger)
		if err != nil {
			if several {
				err = fmt.Errorf("--model %q: %w", e.Flag, err)
			}
			return nil, err
		}
		m := &Model{Entry: e, Name: servedName(e, run.Facts), Run: run}
		if several {
			run.Warm.Logger = run.Warm.Logger.With("model", m.Name)
			run.Long.Logger = run.Long.Logger.With("model", m.Name)
		}
		models.List = append(models.List, m)
		names = append(names, m.Name)
	}
	entries := make([]Entry, len(models.List))
	for i, m := range models.List {
		entries[i] = m.Entry
	}
	if err := CheckNames(entries, names); err != nil {
		return nil, err
	}
	var warm []int64
	if several {
		for _, m := range models.List {
			b, err := m.Run.WarmBytes()
			if err != nil {
				return nil, err
			}
			warm = append(warm, b)
		}
	}
	for _, m := range models.List {
		lim, err := m.Run.Capacity(warm)
		if err != nil {
			return nil, err
		}
		m.Capacity = lim
	}
	var cache *routing.Cache // one for every model: the file identity keeps them apart
	if cfg.CacheBytes > 0 {
		cache = &routing.Cache{MaxBytes: cfg.CacheBytes}
	}
	for _, m := range models.List {
		run := m.Run
		m.File = modelFile(run.Path, logger)
		run.Warm.Spec = cfg.Warm.Spec(run.WarmArgs, run.Warm.Spec)
		logger.Info("ephemeral workers", "model", m.Name, "max", m.Capacity.Workers, "max_tokens", m.Capacity.Tokens, "queue", cfg.EphemeralQueue, "basis", m.Capacity.Basis())
		// A worker that stops answering is killed, and so restarted, by the hang
		// watch (OnDemand.HangTimeout); the keep-alive stops an idle one.
		m.Warm = &backends.OnDemand{Warm: run.Warm, KeepAlive: m.Entry.KeepAlive, HangTimeout: cfg.HangTimeout,
			Logger: run.Warm.Logger}
		run.WarmInfo = m.Warm.Info
		c := cfg.Routing
		c.Model, c.MaxEphemeral, c.MaxEphemeralTokens = m.Name, m.Capacity.Workers, m.Capacity.Tokens
		m.Router = run.Router(c)
		m.Router.Warm = modelrun.WarmBackend{W: m.Warm}
		m.Router.Cache, m.Router.Identity = cache, cacheIdentity(m.File.Digest, run.Weights)
		run.Long.HangTimeout = cfg.HangTimeout
		if cfg.HangTimeout == 0 {
			run.Long.HangTimeout = -1 // off, as for the warm worker
		}
		models.Fleet.Models = append(models.Fleet.Models, backends.FleetModel{Name: m.Name, Warm: m.Warm})
	}
	if cfg.Warm.Name == backends.WarmMLX {
		logger.Info("warm worker: mlx-embed-server", "path", cfg.Warm.MLXServer, "model_dir", cfg.Warm.MLXModel)
	}
	return models, nil
}

// cacheIdentity keys a model's cached vectors: the file's digest, and the weights
// converted from it at load, whose vectors differ from the file's in the last bits
// (a cache shared by servers with and without --weights must not mix them).
func cacheIdentity(digest func() string, w weights.Result) func() string {
	if !w.Converted() {
		return digest
	}
	return func() string {
		d := digest()
		if d == "" {
			return ""
		}
		return d + "+" + w.Type
	}
}

// Start starts the models' warm workers, wording a failure with the flag to
// change (WarmStartError) and, with several models, the model's name.
func (ms *Models) Start(ctx context.Context) error {
	err := ms.Fleet.Start(ctx)
	var me *backends.ModelError
	if !errors.As(err, &me) {
		return err
	}
	err = WarmStartError(me.Err, ms.warmMax)
	if len(ms.Fleet.Models) > 1 {
		err = fmt.Errorf("model %s: %w", me.Model, err)
	}
	return err
}

// Close stops the warm workers (backends.Fleet.Close).
func (ms *Models) Close(ctx context.Context) error { return ms.Fleet.Close(ctx) }

// WarmStartError words a failed start of a warm worker, naming the flag to change
// when the worker holds shorter inputs than --warm-max-tokens (warmMax).
func WarmStartError(err error, warmMax int) error {
	var ce *backends.CapacityError
	if errors.As(err, &ce) {
		return fmt.Errorf("--warm-max-tokens is %d but the warm worker holds inputs of at most %d tokens; lower --warm-max-tokens to %d (longer inputs then go to ephemeral workers): %w",
			warmMax, ce.MaxTokens, ce.MaxTokens, err)
	}
	var de *backends.DimensionError
	if errors.As(err, &de) {
		return fmt.Errorf("the warm worker computes %d-dimensional vectors but --model has %d; with --warm-backend mlx, give --mlx-model the same model as --model: %w", de.NEmbd, de.Want, err)
	}
	return fmt.Errorf("warm worker: %w", err)
}

// Registry describes the models to package server.
func (ms *Models) Registry() []server.Model {
	out := make([]server.Model, len(ms.List))
	for i, m := range ms.List {
		f := m.Run.Facts
		meta := openai.ModelMeta{Architecture: f.Arch.Name, ContextLength: m.Run.ContextLength(), Tokenizer: f.Vocab.Algorithm(),
			Weights: m.Run.Weights.Type, WeightsConvertedFrom: m.Run.Weights.From}
		if !f.Rerank {
			// A reranker's vectors are its two logits: no pooling, no dimensions.
			meta.Pooling, meta.Dimensions = f.Pooling.String(), f.Dim
		}
		out[i] = server.Model{ID: m.Name, Aliases: m.Entry.Aliases, Rerank: f.Rerank, Embedder: m.Router, Reranker: m.Router, Meta: meta}
	}
	return out
}

// Info is GET /info's list of the models: each with its source, file and task
// (the file is hashed in the background: modelFile).
func (ms *Models) Info() []server.ModelInfo {
	out := make([]server.ModelInfo, len(ms.List))
	for i, m := range ms.List {
		f, r := m.Run.Facts, m.Run
		file := m.File
		file.Source, file.Name = m.Entry.Ref, filepath.Base(r.Path)
		info := server.ModelInfo{ID: m.Name, Aliases: m.Entry.Aliases, Task: f.TaskName(), ContextLength: r.ContextLength(),
			Tokenizer: f.Vocab.Algorithm(), SpecialTokens: r.Frame.Text, Limits: m.Router.Limits(), File: file,
			Weights: r.Weights.Type, WeightsFrom: r.Weights.From}
		if f.Rerank {
			info.Reranker = rerankerInfo(f)
		} else {
			info.Pooling = f.Pooling.String()
			info.Prompts = &server.Prompts{Family: r.Prompts.Family, Query: r.Prompts.Query, Document: r.Prompts.Document, Instruction: m.Router.DefaultInstruction()}
		}
		out[i] = info
	}
	return out
}

// rerankerInfo says how a reranker scores a pair (docs/rerank.md).
func rerankerInfo(f *modelinfo.Facts) *server.RerankerInfo {
	if f.CrossEncoder {
		r := &server.RerankerInfo{Head: "classifier", Labels: []string{"relevance"},
			Score: fmt.Sprintf("sigmoid(s), s = %s with h the first token's ([CLS]) state of the pair, as llama.cpp's rank pooling computes the classifier head", f.CrossEncoderHead)}
		if len(f.Shape.ClassifierLabels) == 1 {
			r.Labels = f.Shape.ClassifierLabels
		}
		return r
	}
	r := &server.RerankerInfo{Head: "lm_head_rows", Labels: []string{"yes", "no"}, Score: "sigmoid(logit(yes) - logit(no)), P(yes) as the model card computes it"}
	if f.Shape.HasClassifier {
		r.Head = "classifier"
		if len(f.Shape.ClassifierLabels) > 0 {
			r.Labels = f.Shape.ClassifierLabels
		}
	}
	return r
}

// WarmModels describes each model's warm worker and ephemeral admission to the
// worker gauges, whose series then carry the model's name as their model label.
func (ms *Models) WarmModels() []telemetry.WarmModel {
	out := make([]telemetry.WarmModel, len(ms.List))
	for i, m := range ms.List {
		out[i] = telemetry.WarmModel{
			Name:       m.Name,
			Restarts:   m.Warm.Restarts,
			HangKills:  m.Warm.Kills,
			PID:        m.Warm.PID,
			Ready:      m.Warm.Ready,
			ColdStarts: func() int { n, _ := m.Warm.Loads(); return n },
			Ephemeral:  m.Router.EphemeralState,
		}
	}
	return out
}

// Loaded is GET /api/ps's view of the model named id: its warm worker now.
func (ms *Models) Loaded(id string) server.ModelLoad {
	for _, m := range ms.List {
		if m.Name == id {
			st := m.Warm.State()
			return server.ModelLoad{Loaded: st.Loaded, PID: st.PID, InFlight: st.InFlight, IdleSince: st.IdleSince, Expires: st.Expires}
		}
	}
	return server.ModelLoad{}
}

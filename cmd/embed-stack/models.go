package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/server"
	"github.com/embed-stack/embed-stack/telemetry"
)

// modelEntry is one --model of serve: the reference to load and the names
// requests give it (issue 17: several models behind one address).
type modelEntry struct {
	// name is NAME of NAME=MODEL, or --model-name for a single model; "" takes
	// the GGUF's general.name (see modelName).
	name string
	// ref is a GGUF path or a Hugging Face reference.
	ref string
	// aliases are the --model-alias values that belong to this entry.
	aliases []string
	// keepAlive is its --keep-alive: how long its warm worker may idle before it
	// is stopped (0 = never).
	keepAlive time.Duration
	// pooling and prompts are its --pooling and --prompts ("" = the model's), and
	// queryPrompt and documentPrompt its --query-prompt and --document-prompt
	// (nil = its convention's).
	pooling, prompts            string
	queryPrompt, documentPrompt *string
	// flag is the entry as given, for messages.
	flag string
}

// parseModelEntries reads serve's --model values (NAME=MODEL or MODEL) and
// --model-alias values (ALIAS, or MODEL=ALIAS naming the model by its NAME).
// With one model, --model-name names it and a bare alias is its alias, as before
// models could repeat. With several, --model-name is refused (NAME= names each)
// and so is a bare alias, which could belong to any of them.
func parseModelEntries(models, aliases []string, modelName string) ([]modelEntry, error) {
	entries := make([]modelEntry, 0, len(models))
	for _, m := range models {
		e := modelEntry{ref: m, flag: m}
		// A NAME has no '/': "./a=b.gguf" and "owner/name" are references.
		if name, ref, ok := strings.Cut(m, "="); ok && !strings.Contains(name, "/") {
			if name == "" || ref == "" {
				return nil, fmt.Errorf("--model %q: give NAME=MODEL (a name and a GGUF path or Hugging Face reference) or MODEL alone", m)
			}
			e.name, e.ref = name, ref
		}
		if e.name != "" {
			if err := server.CheckModelName(e.name); err != nil {
				return nil, fmt.Errorf("--model %q: %w", m, err)
			}
		}
		entries = append(entries, e)
	}
	if len(entries) > 1 && modelName != "" {
		return nil, fmt.Errorf("--model-name names a single model; with %d --model, name each as --model NAME=MODEL", len(entries))
	}
	if len(entries) == 1 && modelName != "" {
		if err := server.CheckModelName(modelName); err != nil {
			return nil, fmt.Errorf("--model-name: %w", err)
		}
		if entries[0].name != "" {
			return nil, fmt.Errorf("--model-name %q and --model %q both name the model; keep one", modelName, entries[0].flag)
		}
		entries[0].name = modelName
	}
	for _, a := range aliases {
		target, alias, ok := strings.Cut(a, "=")
		name := a
		if ok {
			name = alias
		}
		if err := server.CheckModelName(name); err != nil && name != "" {
			return nil, fmt.Errorf("--model-alias %q: %w", a, err)
		}
		if !ok {
			if len(entries) > 1 {
				return nil, fmt.Errorf("--model-alias %q: with several --model, say which model it names: --model-alias MODEL=%s", a, a)
			}
			entries[0].aliases = append(entries[0].aliases, a)
			continue
		}
		i := entryNamed(entries, target)
		if i < 0 || alias == "" {
			return nil, fmt.Errorf("--model-alias %q: %q is not the NAME of a --model NAME=MODEL; give --model-alias NAME=ALIAS", a, target)
		}
		entries[i].aliases = append(entries[i].aliases, alias)
	}
	return entries, nil
}

// parseKeepAlive sets each entry's keep-alive from the --keep-alive values:
// DURATION for every model, MODEL=DURATION for the entry named MODEL, which wins
// whatever the order (Ollama's keep_alive is per model as well).
func parseKeepAlive(values []string, entries []modelEntry) error {
	return perModel("--keep-alive", "duration", values, entries, false, func(e *modelEntry, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("give a duration such as 10m (0 never stops a warm worker), or MODEL=DURATION")
		}
		e.keepAlive = d
		return nil
	})
}

// parseModelSettings sets each entry's --pooling, --prompts, --query-prompt and
// --document-prompt, each VALUE for every model or MODEL=VALUE for one (see
// perModel). A prompt may hold '=': its text before one is a MODEL only when a
// model has that name.
func parseModelSettings(f *serveFlags) error {
	if err := perModel("--pooling", "pooling", f.pooling, f.entries, false, func(e *modelEntry, v string) error {
		if _, err := modelinfo.ParsePooling(v); err != nil {
			return errors.New("give mean, cls or last, or MODEL=POOLING")
		}
		e.pooling = v
		return nil
	}); err != nil {
		return err
	}
	if err := perModel("--prompts", "prompt convention", f.prompts, f.entries, false, func(e *modelEntry, v string) error {
		if _, ok := family.PromptsNamed(v); !ok && v != "auto" {
			return fmt.Errorf("give auto or one of %s, or MODEL=NAME", family.PromptNames())
		}
		e.prompts = v
		return nil
	}); err != nil {
		return err
	}
	if err := perModel("--query-prompt", "query prompt", f.queryPrompt, f.entries, true, func(e *modelEntry, v string) error {
		e.queryPrompt = &v
		return nil
	}); err != nil {
		return err
	}
	return perModel("--document-prompt", "document prompt", f.documentPrompt, f.entries, true, func(e *modelEntry, v string) error {
		e.documentPrompt = &v
		return nil
	})
}

// perModel applies the values of a repeatable per-model flag to the entries: a
// VALUE sets every model's, MODEL=VALUE the entry named MODEL's, which wins
// whatever the order; at most one VALUE is for every model. With textual, a value
// whose text before '=' names no model is a VALUE whole (a prompt may hold '=');
// otherwise that is an unknown model. set checks and applies one value.
func perModel(flag, what string, values []string, entries []modelEntry, textual bool, set func(*modelEntry, string) error) error {
	// Each value is kept with the argument it came in, for messages.
	type value struct{ text, arg string }
	var all value
	seenAll := false
	per := map[int]value{}
	for _, v := range values {
		target, text, named := strings.Cut(v, "=")
		i := -1
		if named {
			i = entryNamed(entries, target)
		}
		switch {
		case i >= 0:
			per[i] = value{text, v}
			continue
		case named && !textual:
			return fmt.Errorf("%s %q: %q is not the NAME of a --model NAME=MODEL (or --model-name)", flag, v, target)
		case seenAll:
			return fmt.Errorf("%s %q: a %s for every model is already given; name the model for the others: %s MODEL=%s", flag, v, what, flag, v)
		}
		all, seenAll = value{v, v}, true
	}
	for i := range entries {
		v, ok := per[i]
		if !ok {
			if !seenAll {
				continue
			}
			v = all
		}
		if err := set(&entries[i], v.text); err != nil {
			return fmt.Errorf("%s %q: %w", flag, v.arg, err)
		}
	}
	return nil
}

// entryNamed returns the index of the entry named name, or -1.
func entryNamed(entries []modelEntry, name string) int {
	for i, e := range entries {
		if e.name != "" && e.name == name {
			return i
		}
	}
	return -1
}

// checkModelNames refuses a name or alias given to two models (or twice to one),
// naming both --model entries; the server could not tell which one a request
// means. names[i] is entries[i]'s resolved name.
func checkModelNames(entries []modelEntry, names []string) error {
	owner := map[string]int{}
	for i := range entries {
		if err := server.CheckModelName(names[i]); err != nil {
			// A name from the GGUF's general.name (the others were checked as flags).
			return fmt.Errorf("--model %q: %w; name it with --model NAME=MODEL", entries[i].flag, err)
		}
		for _, n := range append([]string{names[i]}, entries[i].aliases...) {
			if j, ok := owner[n]; ok {
				if i == j {
					return fmt.Errorf("--model %q is named %q twice (its name and an alias); drop the alias", entries[i].flag, n)
				}
				return fmt.Errorf("--model %q and --model %q are both named %q; name them apart with --model NAME=MODEL (without NAME= a model is named by its GGUF's general.name)",
					entries[j].flag, entries[i].flag, n)
			}
			owner[n] = i
		}
	}
	return nil
}

// modelName is the name a model is served under: the entry's, else the GGUF's
// general.name as a slug, else a generic one by task.
func modelName(e modelEntry, facts *modelinfo.Facts) string {
	if e.name != "" {
		return e.name
	}
	return facts.ServedName()
}

// servedModel is one model of serve: its entry and name, its engine, router, warm
// worker and ephemeral admission bounds.
type servedModel struct {
	entry  modelEntry
	name   string
	eng    *engine
	lim    backends.Capacity
	router *routing.Router
	warm   *backends.OnDemand
	// file is what the Ollama and TEI APIs report of the GGUF; its digest is
	// also the router's cache identity.
	file server.ModelFile
}

// servedModels are serve's models in --model order (the first is the default),
// and their warm workers as one fleet.
type servedModels struct {
	list  []*servedModel
	fleet backends.Fleet
}

// loadModels prepares every --model entry (newEngine: resolve, read the GGUF and
// its tokenizer; nothing is started), refuses names given twice, sizes each
// model's ephemeral workers with every model's warm worker counted
// (backends.CapacityConfig.Warm), and gives each a router with the limits and its
// warm worker, run on demand (--keep-alive) and watched for hangs.
func loadModels(ctx context.Context, f *serveFlags, limits routing.Config, logger *slog.Logger) (*servedModels, error) {
	models := &servedModels{}
	names := make([]string, 0, len(f.entries))
	for _, e := range f.entries {
		cfg := f.engine
		cfg.Model = e.ref
		cfg.Pooling, cfg.Prompts = e.pooling, e.prompts
		cfg.QueryPrompt, cfg.DocumentPrompt = e.queryPrompt, e.documentPrompt
		eng, err := newEngine(ctx, cfg, logger)
		if err != nil {
			if len(f.entries) > 1 {
				err = fmt.Errorf("--model %q: %w", e.flag, err)
			}
			return nil, err
		}
		m := &servedModel{entry: e, name: modelName(e, eng.facts), eng: eng}
		if len(f.entries) > 1 {
			eng.warm.Logger = eng.warm.Logger.With("model", m.name)
			eng.long.Logger = eng.long.Logger.With("model", m.name)
		}
		models.list = append(models.list, m)
		names = append(names, m.name)
	}
	entries := make([]modelEntry, len(models.list))
	for i, m := range models.list {
		entries[i] = m.entry
	}
	if err := checkModelNames(entries, names); err != nil {
		return nil, err
	}
	var warm []int64
	if len(models.list) > 1 {
		for _, m := range models.list {
			b, err := m.eng.warmBytes(m.eng.warmMax)
			if err != nil {
				return nil, err
			}
			warm = append(warm, b)
		}
	}
	for _, m := range models.list {
		lim, err := m.eng.capacity(f.engine, warm)
		if err != nil {
			return nil, err
		}
		m.lim = lim
	}
	var cache *routing.Cache // one for every model: the file identity keeps them apart
	if f.cacheSizeMiB > 0 {
		cache = &routing.Cache{MaxBytes: f.cacheSizeMiB << 20}
	}
	for _, m := range models.list {
		m.file = modelFile(m.eng.modelPath, logger)
		m.eng.warm.Spec = f.warm.Spec(m.eng.warmArgs, m.eng.warm.Spec)
		logger.Info("ephemeral workers", "model", m.name, "max", m.lim.Workers, "max_tokens", m.lim.Tokens, "queue", f.ephemeralQueue, "basis", m.lim.Basis())
		// A worker that stops answering is killed, and so restarted, by the hang
		// watch (OnDemand.HangTimeout); --keep-alive stops an idle one.
		m.warm = &backends.OnDemand{Warm: m.eng.warm, KeepAlive: m.entry.keepAlive, HangTimeout: f.workerHangTimeout,
			Logger: m.eng.warm.Logger}
		m.eng.warmInfo = m.warm.Info
		c := limits
		c.Model, c.MaxEphemeral, c.MaxEphemeralTokens = m.name, m.lim.Workers, m.lim.Tokens
		m.router = m.eng.router(c)
		m.router.Warm = warmBackend{m.warm}
		m.router.Cache, m.router.Identity = cache, m.file.Digest
		m.eng.long.HangTimeout = f.workerHangTimeout
		if f.workerHangTimeout == 0 {
			m.eng.long.HangTimeout = -1 // off, as for the warm worker
		}
		models.fleet.Models = append(models.fleet.Models, backends.FleetModel{Name: m.name, Warm: m.warm})
	}
	if f.warm.Name == backends.WarmMLX {
		logger.Info("warm worker: mlx-embed-server", "path", f.warm.MLXServer, "model_dir", f.warm.MLXModel)
	}
	return models, nil
}

// registry describes the models to package server.
func (ms *servedModels) registry() []server.Model {
	out := make([]server.Model, len(ms.list))
	for i, m := range ms.list {
		f := m.eng.facts
		meta := openai.ModelMeta{Architecture: f.Arch.Name, ContextLength: m.eng.contextLength(), Tokenizer: f.Vocab.Algorithm()}
		if !f.Rerank {
			// A reranker's vectors are its two logits: no pooling, no dimensions.
			meta.Pooling, meta.Dimensions = f.Pooling.String(), f.Dim
		}
		out[i] = server.Model{ID: m.name, Aliases: m.entry.aliases, Rerank: f.Rerank, Embedder: m.router, Reranker: m.router, Meta: meta}
	}
	return out
}

// info is GET /info's list of the models: each with its source, file and task
// (the file is hashed in the background: loadModels' modelFile).
func (ms *servedModels) info() []server.ModelInfo {
	out := make([]server.ModelInfo, len(ms.list))
	for i, m := range ms.list {
		f, e := m.eng.facts, m.eng
		file := m.file
		file.Source, file.Name = m.entry.ref, filepath.Base(e.modelPath)
		info := server.ModelInfo{ID: m.name, Aliases: m.entry.aliases, Task: f.TaskName(), ContextLength: e.contextLength(),
			Tokenizer: f.Vocab.Algorithm(), SpecialTokens: e.frame.Text, Limits: m.router.Limits(), File: file}
		if f.Rerank {
			info.Reranker = rerankerInfo(f)
		} else {
			info.Pooling = f.Pooling.String()
			info.Prompts = &server.Prompts{Family: e.prompts.Family, Query: e.prompts.Query, Document: e.prompts.Document, Instruction: m.router.DefaultInstruction()}
		}
		out[i] = info
	}
	return out
}

// rerankerInfo says how a reranker scores a pair (docs/rerank.md).
func rerankerInfo(f *modelinfo.Facts) *server.RerankerInfo {
	if f.CrossEncoder {
		r := &server.RerankerInfo{Head: "classifier", Labels: []string{"relevance"}, Score: "sigmoid(logit) of the classifier head over the [CLS] state of [CLS] query [SEP] document [SEP], as sentence-transformers' CrossEncoder computes it"}
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

// warmModels describes each model's warm worker and ephemeral admission to the
// worker gauges, whose series then carry the model's name as their model label.
func (ms *servedModels) warmModels() []telemetry.WarmModel {
	out := make([]telemetry.WarmModel, len(ms.list))
	for i, m := range ms.list {
		out[i] = telemetry.WarmModel{
			Name:       m.name,
			Restarts:   m.warm.Restarts,
			HangKills:  m.warm.Kills,
			PID:        m.warm.PID,
			Ready:      m.warm.Ready,
			ColdStarts: func() int { n, _ := m.warm.Loads(); return n },
			Ephemeral:  m.router.EphemeralState,
		}
	}
	return out
}

// load is GET /api/ps's view of the model named id: its warm worker now.
func (ms *servedModels) load(id string) server.ModelLoad {
	for _, m := range ms.list {
		if m.name == id {
			st := m.warm.State()
			return server.ModelLoad{Loaded: st.Loaded, PID: st.PID, InFlight: st.InFlight, IdleSince: st.IdleSince, Expires: st.Expires}
		}
	}
	return server.ModelLoad{}
}

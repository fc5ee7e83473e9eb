package served

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/modelinfo"
	"github.com/embed-stack/embed-stack/server"
	"github.com/embed-stack/embed-stack/weights"
)

// Entry is one --model of serve: the reference to load and the names
// requests give it (issue 17: several models behind one address).
type Entry struct {
	// Name is NAME of NAME=MODEL, or --model-name for a single model; "" takes
	// the GGUF's general.name (see Load).
	Name string
	// Ref is a GGUF path or a Hugging Face reference.
	Ref string
	// Aliases are the --model-alias values that belong to this entry.
	Aliases []string
	// KeepAlive is its --keep-alive: how long its warm worker may idle before it
	// is stopped (0 = never).
	KeepAlive time.Duration
	// Pooling and Prompts are its --pooling and --prompts ("" = the model's), and
	// QueryPrompt and DocumentPrompt its --query-prompt and --document-prompt
	// (nil = its convention's).
	Pooling, Prompts            string
	QueryPrompt, DocumentPrompt *string
	// Weights is its --weights ("" = the configuration's: package weights).
	Weights string
	// Flag is the entry as given, for messages.
	Flag string
}

// ParseEntries reads serve's --model values (NAME=MODEL or MODEL) and
// --model-alias values (ALIAS, or MODEL=ALIAS naming the model by its NAME).
// With one model, --model-name names it and a bare alias is its alias, as before
// models could repeat. With several, --model-name is refused (NAME= names each)
// and so is a bare alias, which could belong to any of them.
func ParseEntries(models, aliases []string, modelName string) ([]Entry, error) {
	entries := make([]Entry, 0, len(models))
	for _, m := range models {
		e := Entry{Ref: m, Flag: m}
		// A NAME has no '/': "./a=b.gguf" and "owner/name" are references.
		if name, ref, ok := strings.Cut(m, "="); ok && !strings.Contains(name, "/") {
			if name == "" || ref == "" {
				return nil, fmt.Errorf("--model %q: give NAME=MODEL (a name and a GGUF path or Hugging Face reference) or MODEL alone", m)
			}
			e.Name, e.Ref = name, ref
		}
		if e.Name != "" {
			if err := server.CheckModelName(e.Name); err != nil {
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
		if entries[0].Name != "" {
			return nil, fmt.Errorf("--model-name %q and --model %q both name the model; keep one", modelName, entries[0].Flag)
		}
		entries[0].Name = modelName
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
			entries[0].Aliases = append(entries[0].Aliases, a)
			continue
		}
		i := entryNamed(entries, target)
		if i < 0 || alias == "" {
			return nil, fmt.Errorf("--model-alias %q: %q is not the NAME of a --model NAME=MODEL; give --model-alias NAME=ALIAS", a, target)
		}
		entries[i].Aliases = append(entries[i].Aliases, alias)
	}
	return entries, nil
}

// ParseKeepAlive sets each entry's keep-alive from the --keep-alive values:
// DURATION for every model, MODEL=DURATION for the entry named MODEL, which wins
// whatever the order (Ollama's keep_alive is per model as well).
func ParseKeepAlive(values []string, entries []Entry) error {
	return perModel("--keep-alive", "duration", values, entries, false, func(e *Entry, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("give a duration such as 10m (0 never stops a warm worker), or MODEL=DURATION")
		}
		e.KeepAlive = d
		return nil
	})
}

// ParseWeights sets each entry's --weights from the values: MODE (auto, file or
// bf16) for every model, MODEL=MODE for one.
func ParseWeights(values []string, entries []Entry) error {
	return perModel("--weights", "weights mode", values, entries, false, func(e *Entry, v string) error {
		mode, err := weights.ParseMode(v)
		if err != nil {
			return fmt.Errorf("give %s, or MODEL=MODE", strings.Join(weights.Modes, ", "))
		}
		e.Weights = mode
		return nil
	})
}

// ParseSettings sets each entry's --pooling, --prompts, --query-prompt and
// --document-prompt, each VALUE for every model or MODEL=VALUE for one (see
// perModel). A prompt may hold '=': its text before one is a MODEL only when a
// model has that name.
func ParseSettings(entries []Entry, pooling, prompts, queryPrompt, documentPrompt []string) error {
	if err := perModel("--pooling", "pooling", pooling, entries, false, func(e *Entry, v string) error {
		if _, err := modelinfo.ParsePooling(v); err != nil {
			return errors.New("give mean, cls or last, or MODEL=POOLING")
		}
		e.Pooling = v
		return nil
	}); err != nil {
		return err
	}
	if err := perModel("--prompts", "prompt convention", prompts, entries, false, func(e *Entry, v string) error {
		if _, ok := family.PromptsNamed(v); !ok && v != "auto" {
			return fmt.Errorf("give auto or one of %s, or MODEL=NAME", family.PromptNames())
		}
		e.Prompts = v
		return nil
	}); err != nil {
		return err
	}
	if err := perModel("--query-prompt", "query prompt", queryPrompt, entries, true, func(e *Entry, v string) error {
		e.QueryPrompt = &v
		return nil
	}); err != nil {
		return err
	}
	return perModel("--document-prompt", "document prompt", documentPrompt, entries, true, func(e *Entry, v string) error {
		e.DocumentPrompt = &v
		return nil
	})
}

// perModel applies the values of a repeatable per-model flag to the entries: a
// VALUE sets every model's, MODEL=VALUE the entry named MODEL's, which wins
// whatever the order; at most one VALUE is for every model. With textual, a value
// whose text before '=' names no model is a VALUE whole (a prompt may hold '=');
// otherwise that is an unknown model. set checks and applies one value.
func perModel(flag, what string, values []string, entries []Entry, textual bool, set func(*Entry, string) error) error {
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
func entryNamed(entries []Entry, name string) int {
	for i, e := range entries {
		if e.Name != "" && e.Name == name {
			return i
		}
	}
	return -1
}

// CheckNames refuses a name or alias given to two models (or twice to one),
// naming both --model entries; the server could not tell which one a request
// means. names[i] is entries[i]'s resolved name.
func CheckNames(entries []Entry, names []string) error {
	owner := map[string]int{}
	for i := range entries {
		if err := server.CheckModelName(names[i]); err != nil {
			// A name from the GGUF's general.name (the others were checked as flags).
			return fmt.Errorf("--model %q: %w; name it with --model NAME=MODEL", entries[i].Flag, err)
		}
		for _, n := range append([]string{names[i]}, entries[i].Aliases...) {
			if j, ok := owner[n]; ok {
				if i == j {
					return fmt.Errorf("--model %q is named %q twice (its name and an alias); drop the alias", entries[i].Flag, n)
				}
				return fmt.Errorf("--model %q and --model %q are both named %q; name them apart with --model NAME=MODEL (without NAME= a model is named by its GGUF's general.name)",
					entries[j].Flag, entries[i].Flag, n)
			}
			owner[n] = i
		}
	}
	return nil
}

// servedName is the name a model is served under: the entry's, else the GGUF's
// general.name as a slug, else a generic one by task.
func servedName(e Entry, facts *modelinfo.Facts) string {
	if e.Name != "" {
		return e.Name
	}
	return facts.ServedName()
}

package served

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/weights"
)

func TestParseModelEntries(t *testing.T) {
	tests := []struct {
		models, aliases []string
		modelName       string
		want            string // the entries as name|ref|aliases, or the error
	}{
		{[]string{"m.gguf"}, []string{"x", "y"}, "", "|m.gguf|[x y]"},
		{[]string{"m.gguf"}, nil, "emb", "emb|m.gguf|[]"},
		{[]string{"Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0"}, nil, "", "|Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0|[]"},
		{[]string{"./dir=x/m.gguf"}, nil, "", "|./dir=x/m.gguf|[]"}, // a '/' before '=': a path
		{[]string{"q=Qwen/Qwen3-Embedding-0.6B-GGUF", "r=r.gguf", "m.gguf"}, []string{"q=text-embedding-3-small", "r=rerank-v3.5", "q=ada"}, "",
			"q|Qwen/Qwen3-Embedding-0.6B-GGUF|[text-embedding-3-small ada] r|r.gguf|[rerank-v3.5] |m.gguf|[]"},
		{[]string{"a=m.gguf", "b=m.gguf"}, nil, "x", "--model-name names a single model; with 2 --model, name each as --model NAME=MODEL"},
		{[]string{"a=m.gguf"}, nil, "x", `--model-name "x" and --model "a=m.gguf" both name the model; keep one`},
		{[]string{"a=m.gguf", "b=m.gguf"}, []string{"ada"}, "", `--model-alias "ada": with several --model, say which model it names: --model-alias MODEL=ada`},
		{[]string{"a=m.gguf", "b=m.gguf"}, []string{"c=ada"}, "", `--model-alias "c=ada": "c" is not the NAME of a --model NAME=MODEL; give --model-alias NAME=ALIAS`},
		{[]string{"=m.gguf"}, nil, "", `--model "=m.gguf": give NAME=MODEL (a name and a GGUF path or Hugging Face reference) or MODEL alone`},
	}
	for _, tt := range tests {
		entries, err := ParseEntries(tt.models, tt.aliases, tt.modelName)
		var got string
		if err != nil {
			got = err.Error()
		} else {
			var parts []string
			for _, e := range entries {
				parts = append(parts, fmt.Sprintf("%s|%s|%v", e.Name, e.Ref, append([]string{}, e.Aliases...)))
			}
			got = strings.Join(parts, " ")
		}
		if got != tt.want {
			t.Errorf("models %q aliases %q name %q:\n got %s\nwant %s", tt.models, tt.aliases, tt.modelName, got, tt.want)
		}
	}
}

func TestCheckModelNames(t *testing.T) {
	entries := []Entry{{Flag: "a.gguf", Aliases: []string{"x"}}, {Flag: "b=b.gguf"}, {Flag: "c=c.gguf", Aliases: []string{"c"}}}
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{[]string{"a", "b", "c"}, `--model "c=c.gguf" is named "c" twice (its name and an alias); drop the alias`},
		{[]string{"a", "a", "c"}, `--model "a.gguf" and --model "b=b.gguf" are both named "a"; name them apart with --model NAME=MODEL (without NAME= a model is named by its GGUF's general.name)`},
		{[]string{"a", "x", "c"}, `--model "a.gguf" and --model "b=b.gguf" are both named "x"; name them apart with --model NAME=MODEL (without NAME= a model is named by its GGUF's general.name)`},
	} {
		if err := CheckNames(entries, tt.names); err == nil || err.Error() != tt.want {
			t.Errorf("names %v: %v\nwant %s", tt.names, err, tt.want)
		}
	}
	entries[2].Aliases = nil
	if err := CheckNames(entries, []string{"a", "b", "c"}); err != nil {
		t.Errorf("distinct names refused: %v", err)
	}
}

func TestParseKeepAlive(t *testing.T) {
	entries := func() []Entry { return []Entry{{Name: "a"}, {Name: "b"}, {}} }
	for _, tt := range []struct {
		values []string
		want   string // each entry's keep-alive, or the error
	}{
		{nil, "[0s 0s 0s]"},
		{[]string{"10m"}, "[10m0s 10m0s 10m0s]"},
		{[]string{"b=1h", "30s"}, "[30s 1h0m0s 30s]"},
		{[]string{"a=0", "5m"}, "[0s 5m0s 5m0s]"},
		{[]string{"-1s"}, `--keep-alive "-1s": give a duration such as 10m (0 never stops a warm worker), or MODEL=DURATION`},
		{[]string{"a=soon"}, `--keep-alive "a=soon": give a duration such as 10m (0 never stops a warm worker), or MODEL=DURATION`},
		{[]string{"c=1m"}, `--keep-alive "c=1m": "c" is not the NAME of a --model NAME=MODEL (or --model-name)`},
		{[]string{"1m", "2m"}, `--keep-alive "2m": a duration for every model is already given; name the model for the others: --keep-alive MODEL=2m`},
	} {
		e := entries()
		var got string
		if err := ParseKeepAlive(tt.values, e); err != nil {
			got = err.Error()
		} else {
			got = fmt.Sprint([]time.Duration{e[0].KeepAlive, e[1].KeepAlive, e[2].KeepAlive})
		}
		if got != tt.want {
			t.Errorf("%q: got %s\nwant %s", tt.values, got, tt.want)
		}
	}
}

func TestWarmStartError(t *testing.T) {
	err := WarmStartError(fmt.Errorf("starting the warm worker: %w", &backends.CapacityError{PID: 7, MaxTokens: 4096, Want: 8192}), 8192)
	const want = "--warm-max-tokens is 8192 but the warm worker holds inputs of at most 4096 tokens; lower --warm-max-tokens to 4096"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q\nwant it to start %q", err, want)
	}
	err = WarmStartError(fmt.Errorf("starting the warm worker: %w", &backends.DimensionError{PID: 7, NEmbd: 768, Want: 1024}), 8192)
	const wantDim = "the warm worker computes 768-dimensional vectors but --model has 1024; with --warm-backend mlx, give --mlx-model the same model as --model: starting the warm worker: the worker (pid 7) computes 768-dimensional vectors, but the model has 1024: is it running another model?"
	if err.Error() != wantDim {
		t.Errorf("message %q\nwant %q", err, wantDim)
	}
	other := errors.New("boom")
	if err := WarmStartError(other, 8192); !errors.Is(err, other) || err.Error() != "warm worker: boom" {
		t.Errorf("other failure: %v", err)
	}
}

// TestParseSettings: a per-model value names its model by NAME, a bare one is for
// every model, and a prompt's text before '=' is a model only when one has that name.
func TestParseSettings(t *testing.T) {
	entries := func() []Entry { return []Entry{{Name: "a"}, {Name: "b"}} }
	describe := func(e []Entry) string {
		var parts []string
		for _, x := range e {
			q := "<nil>"
			if x.QueryPrompt != nil {
				q = *x.QueryPrompt
			}
			parts = append(parts, fmt.Sprintf("%s:%s:%s:%s", x.Name, x.Pooling, x.Prompts, q))
		}
		return strings.Join(parts, " ")
	}
	for _, tt := range []struct {
		pooling, prompts, query []string
		want                    string
	}{
		{[]string{"mean", "b=cls"}, []string{"a=e5"}, nil, "a:mean:e5:<nil> b:cls::<nil>"},
		{nil, nil, []string{"x=y: "}, "a:::x=y:  b:::x=y: "},
		{nil, nil, []string{"a=Q: ", "R: "}, "a:::Q:  b:::R: "},
		{[]string{"max"}, nil, nil, `--pooling "max": give mean, cls or last, or MODEL=POOLING`},
		{[]string{"c=mean"}, nil, nil, `--pooling "c=mean": "c" is not the NAME of a --model NAME=MODEL (or --model-name)`},
		{nil, []string{"klingon"}, nil, `--prompts "klingon": give auto or one of ` + family.PromptNames() + `, or MODEL=NAME`},
	} {
		e := entries()
		var got string
		if err := ParseSettings(e, tt.pooling, tt.prompts, tt.query, nil); err != nil {
			got = err.Error()
		} else {
			got = describe(e)
		}
		if got != tt.want {
			t.Errorf("pooling %q prompts %q query %q:\n got %s\nwant %s", tt.pooling, tt.prompts, tt.query, got, tt.want)
		}
	}
}

func TestParseWeights(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   string
	}{
		{nil, "a: b:"},
		{[]string{"bf16"}, "a:bf16 b:bf16"},
		{[]string{"b=FILE", "bf16"}, "a:bf16 b:file"},
		{[]string{"a=auto"}, "a:auto b:"},
		{[]string{"f16"}, `--weights "f16": give auto, file, bf16, or MODEL=MODE`},
		{[]string{"c=bf16"}, `--weights "c=bf16": "c" is not the NAME of a --model NAME=MODEL (or --model-name)`},
		{[]string{"file", "bf16"}, `--weights "bf16": a weights mode for every model is already given; name the model for the others: --weights MODEL=bf16`},
	} {
		e := []Entry{{Name: "a"}, {Name: "b"}}
		var got string
		if err := ParseWeights(tt.values, e); err != nil {
			got = err.Error()
		} else {
			got = "a:" + e[0].Weights + " b:" + e[1].Weights
		}
		if got != tt.want {
			t.Errorf("%q:\n got %s\nwant %s", tt.values, got, tt.want)
		}
	}
}

// TestCacheIdentity: converted weights key the vector cache apart from the file's
// own, and a digest not yet known keys nothing.
func TestCacheIdentity(t *testing.T) {
	digest := "abc"
	d := func() string { return digest }
	if got := cacheIdentity(d, weights.Result{Path: "m.gguf", Type: "F16"})(); got != "abc" {
		t.Errorf("file as it is: %q", got)
	}
	conv := cacheIdentity(d, weights.Result{Path: "c.gguf", Type: "BF16", From: "F16"})
	if got := conv(); got != "abc+BF16" {
		t.Errorf("converted: %q", got)
	}
	digest = ""
	if got := conv(); got != "" {
		t.Errorf("unknown digest: %q", got)
	}
}

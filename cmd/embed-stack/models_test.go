package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		entries, err := parseModelEntries(tt.models, tt.aliases, tt.modelName)
		var got string
		if err != nil {
			got = err.Error()
		} else {
			var parts []string
			for _, e := range entries {
				parts = append(parts, fmt.Sprintf("%s|%s|%v", e.name, e.ref, append([]string{}, e.aliases...)))
			}
			got = strings.Join(parts, " ")
		}
		if got != tt.want {
			t.Errorf("models %q aliases %q name %q:\n got %s\nwant %s", tt.models, tt.aliases, tt.modelName, got, tt.want)
		}
	}
}

func TestCheckModelNames(t *testing.T) {
	entries := []modelEntry{{flag: "a.gguf", aliases: []string{"x"}}, {flag: "b=b.gguf"}, {flag: "c=c.gguf", aliases: []string{"c"}}}
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{[]string{"a", "b", "c"}, `--model "c=c.gguf" is named "c" twice (its name and an alias); drop the alias`},
		{[]string{"a", "a", "c"}, `--model "a.gguf" and --model "b=b.gguf" are both named "a"; name them apart with --model NAME=MODEL (without NAME= a model is named by its GGUF's general.name)`},
		{[]string{"a", "x", "c"}, `--model "a.gguf" and --model "b=b.gguf" are both named "x"; name them apart with --model NAME=MODEL (without NAME= a model is named by its GGUF's general.name)`},
	} {
		if err := checkModelNames(entries, tt.names); err == nil || err.Error() != tt.want {
			t.Errorf("names %v: %v\nwant %s", tt.names, err, tt.want)
		}
	}
	entries[2].aliases = nil
	if err := checkModelNames(entries, []string{"a", "b", "c"}); err != nil {
		t.Errorf("distinct names refused: %v", err)
	}
}

// TestSeveralModelsConfig: the entries come as a list from a config file (YAML
// here) and comma-separated from EMBED_STACK_MODEL, as every repeatable flag does.
func TestSeveralModelsConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "embed-stack.yaml")
	body := "model:\n  - small=Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0\n  - rr=models/tiny-reranker.gguf\nmodel_alias: [small=text-embedding-3-small]\nkeep_alive: [rr=0s, 5m]\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	describe := func(f *serveFlags) string {
		var parts []string
		for _, e := range f.entries {
			parts = append(parts, fmt.Sprintf("%s|%s|%v|%s", e.name, e.ref, e.aliases, e.keepAlive))
		}
		return strings.Join(parts, " ")
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"file", map[string]string{"EMBED_STACK_CONFIG": file},
			"small|Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0|[text-embedding-3-small]|5m0s rr|models/tiny-reranker.gguf|[]|0s"},
		{"env", map[string]string{"EMBED_STACK_MODEL": "a=a.gguf, b=b.gguf", "EMBED_STACK_MODEL_ALIAS": "b=x,b=y"},
			"a|a.gguf|[]|0s b|b.gguf|[x y]|0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			f, err := parseServeFlags(nil, &out, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if got := describe(f); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestParseKeepAlive(t *testing.T) {
	entries := func() []modelEntry { return []modelEntry{{name: "a"}, {name: "b"}, {}} }
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
		if err := parseKeepAlive(tt.values, e); err != nil {
			got = err.Error()
		} else {
			got = fmt.Sprint([]time.Duration{e[0].keepAlive, e[1].keepAlive, e[2].keepAlive})
		}
		if got != tt.want {
			t.Errorf("%q: got %s\nwant %s", tt.values, got, tt.want)
		}
	}
}

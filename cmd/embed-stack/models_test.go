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

// TestSharedEphemeralLimits: with several models, every warm worker beyond the
// largest comes off the ephemeral half of the memory (the other half was sized for
// one), and the rest is split evenly; one model is sized as before.
func TestSharedEphemeralLimits(t *testing.T) {
	const kv06 = 114688 // 0.6B
	const gib = int64(1) << 30
	one := defaultEphemeralLimits(0, 0, 32768, kv06, 64*gib, 64)
	if alone := sharedEphemeralLimits(0, 0, 32768, kv06, 64*gib, 64, memShare{warm: []int64{3 * gib}}); alone != one {
		t.Errorf("one model in a memShare: %+v, want %+v", alone, one)
	}
	// 64 GiB: 32 for ephemeral workers; two more warm workers of 3 GiB leave 26,
	// 8.7 each. A 32k input costs 3.5 GiB of KV cache + 0.75: 2 workers fit, where
	// one model alone gets 7 (64 CPUs allow 8).
	two := sharedEphemeralLimits(0, 0, 32768, kv06, 64*gib, 64, memShare{warm: []int64{3 * gib, 3 * gib, 3 * gib}})
	perModel := (32*gib - 6*gib) / 3
	wantWorkers := int(perModel / (workerOverhead + kv06*32768))
	if two.workers != wantWorkers || wantWorkers != 2 || two.tokens != 2*32768 || one.workers != 7 {
		t.Errorf("three models: %d workers, %d tokens (one model: %d); want %d, %d (%s)", two.workers, two.tokens, one.workers, wantWorkers, 2*32768, two.basis)
	}
	if !strings.HasSuffix(two.basis, "; 3 models: 6144 MiB off for the warm workers beyond the largest, the rest split 3 ways") {
		t.Errorf("basis %q", two.basis)
	}
	// Warm workers that take all the memory still leave one admitted input per model.
	none := sharedEphemeralLimits(0, 0, 32768, kv06, 8*gib, 64, memShare{warm: []int64{6 * gib, 6 * gib}})
	if none.workers != 1 || none.tokens != 32768 || checkEphemeralLimits(none, 32768) != nil {
		t.Errorf("no memory left: %+v", none)
	}
	// On a GPU every model's warm worker comes off first, this one's included.
	weights := int64(640 << 20)
	warm := weights + kv06*8192 + gpuWorkerOverhead
	g1 := gpuEphemeralLimits(0, 0, 32768, 8192, kv06, weights, 40*gib, "GPU")
	g2 := sharedGPUEphemeralLimits(0, 0, 32768, 8192, kv06, weights, 40*gib, "GPU", memShare{warm: []int64{warm, warm}})
	budget := (40 * gib / 10 * 9) - 2*warm
	if want := int(max(1, min(budget/2/(weights+gpuWorkerOverhead+kv06*32768), gpuMaxEphemeral))); g2.workers != want || g2.workers >= g1.workers {
		t.Errorf("GPU, two models: %d workers (one model: %d); want %d", g2.workers, g1.workers, want)
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

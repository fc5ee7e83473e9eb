package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
			parts = append(parts, fmt.Sprintf("%s|%s|%v|%s", e.Name, e.Ref, e.Aliases, e.KeepAlive))
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

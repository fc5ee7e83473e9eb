package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/flagconfig"
)

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "embed-stack.toml")
	os.WriteFile(file, []byte("max_inputs = 7\nmax-total-tokens = 1000\nwarm_max_tokens = 4096\nmodel_alias = [\"a\", \"b\"]\nstrict_model = true\n"), 0o600)
	env := map[string]string{
		"EMBED_STACK_CONFIG":           file,
		"EMBED_STACK_MAX_TOTAL_TOKENS": "2000",
		"EMBED_STACK_THREADS":          "5",
	}
	f := &serveFlags{}
	s := newServeFlagSet(f)
	if err := s.Parse([]string{"--threads", "3", "--model", "m.gguf"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name   string
		got    any
		want   any
		source string
	}{
		{"threads", f.run.Threads, 3, flagconfig.FromFlag},               // flag beats env
		{"max-total-tokens", f.maxTotalTokens, 2000, flagconfig.FromEnv}, // env beats file
		{"max-inputs", f.maxInputs, 7, flagconfig.FromFile},
		{"warm-max-tokens", f.run.WarmMaxTokens, 4096, flagconfig.FromFile},
		{"strict-model", f.strictModel, true, flagconfig.FromFile},
		{"model-alias", fmt.Sprint(f.aliases), "[a b]", flagconfig.FromFile},
		{"max-input-tokens", f.run.MaxInputTokens, 32768, flagconfig.FromDefault},
		{"config", f.configPath, file, flagconfig.FromEnv},
	}
	for _, c := range checks {
		if c.got != c.want || s.Source(c.name) != c.source {
			t.Errorf("%s = %v from %s, want %v from %s", c.name, c.got, s.Source(c.name), c.want, c.source)
		}
	}
}

func TestServeFlagValidation(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "--model is required"},
		{[]string{"--model", "m", "--warm-max-tokens", "40000"}, "--warm-max-tokens (40000) is larger than --max-input-tokens (32768); lower it"},
		{[]string{"--model", "m", "--max-inputs", "0"}, "--max-inputs must be at least 1; got 0"},
		{[]string{"--model", "m", "--max-ephemeral", "-1"}, "--max-ephemeral must not be negative; got -1"},
		{[]string{"--model", "m", "--ephemeral-nice", "20"}, "--ephemeral-nice must be 0 to 19; got 20"},
		{[]string{"--model", "m", "--batch-window", "-1s"}, "--batch-window must not be negative; got -1s"},
		{[]string{"--model", "m", "--request-timeout", "0"}, "--request-timeout must be positive; got 0s"},
		{[]string{"--model", "m", "--max-header-bytes", "100"}, "--max-header-bytes must be at least 1024; got 100"},
		{[]string{"--model", "m", "--max-inputs", "many"}, `--max-inputs "many": not a whole number`},
		{[]string{"--model", "m", "--drain-delay", "soon"}, `--drain-delay "soon": not a duration such as 500ms, 30s or 5m`},
		{[]string{"--model", "m", "--api-key", " k"}, "--api-key #1: the key starts or ends with white space"},
	}
	for _, tt := range tests {
		_, err := parseServeFlags(tt.args, new(bytes.Buffer), new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestPrintConfigRedactsAndRoundTrips(t *testing.T) {
	var out bytes.Buffer
	s := newServeFlagSet(&serveFlags{})
	if err := s.Parse([]string{"--api-key", "sk-secret", "--addr", "0.0.0.0:9"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	s.Print(&out)
	text := out.String()
	if strings.Contains(text, "sk-secret") || !strings.Contains(text, `api_key                = "<redacted>"`) {
		t.Fatalf("secret not redacted:\n%s", text)
	}
	if !strings.Contains(text, `addr                   = "0.0.0.0:9"`) {
		t.Fatalf("addr line missing:\n%s", text)
	}
	// The printed config, minus the redacted secret, is a valid --config file.
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" && !strings.HasPrefix(l, "api_key") {
			lines = append(lines, l)
		}
	}
	p := filepath.Join(t.TempDir(), "printed.toml")
	os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o600)
	g := &serveFlags{}
	if err := newServeFlagSet(g).Parse([]string{"--config", p}, func(string) string { return "" }); err != nil {
		t.Fatalf("printed config does not load: %v", err)
	}
	if g.addr != "0.0.0.0:9" || g.maxInputs != 2048 {
		t.Fatalf("reloaded %+v", g)
	}
}

// TestConfigurationDocs fails when docs/configuration.md no longer matches the flag
// definitions. Regenerate with: go test ./cmd/embed-stack -run TestConfigurationDocs -update
func TestConfigurationDocs(t *testing.T) {
	want := configurationDoc()
	path := filepath.Join("..", "..", "docs", "configuration.md")
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("docs/configuration.md is out of date with the flags; run: go test ./cmd/embed-stack -run TestConfigurationDocs -update")
	}
}

var update = flag.Bool("update", false, "rewrite generated docs")

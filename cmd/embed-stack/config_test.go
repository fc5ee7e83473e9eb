package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	fs := newServeFlagSet(f)
	sources, err := configure(fs, []string{"--threads", "3", "--model", "m.gguf"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name   string
		got    any
		want   any
		source string
	}{
		{"threads", f.threads, 3, fromFlag},                   // flag beats env
		{"max-total-tokens", f.maxTotalTokens, 2000, fromEnv}, // env beats file
		{"max-inputs", f.maxInputs, 7, fromFile},
		{"warm-max-tokens", f.warmMaxTokens, 4096, fromFile},
		{"strict-model", f.strictModel, true, fromFile},
		{"model-alias", fmt.Sprint(f.aliases), "[a b]", fromFile},
		{"max-input-tokens", f.maxInputTokens, 32768, fromDefault},
		{"config", f.configPath, file, fromEnv},
	}
	for _, c := range checks {
		if c.got != c.want || sources[c.name] != c.source {
			t.Errorf("%s = %v from %s, want %v from %s", c.name, c.got, sources[c.name], c.want, c.source)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad env value", nil, map[string]string{"EMBED_STACK_MAX_INPUTS": "many"}, `EMBED_STACK_MAX_INPUTS="many": parse error`},
		{"unknown file key", []string{"--config", write("a.yaml", "max_input: 3\n")}, nil,
			`unknown setting "max_input" (the settings are the flags of --help, without the dashes)`},
		{"bad file value", []string{"--config", write("b.json", `{"max_inputs": "x"}`)}, nil, `max_inputs = "x": parse error`},
		{"list for a scalar", []string{"--config", write("c.toml", "addr = [\"a\", \"b\"]\n")}, nil, "addr takes one value, not a list"},
		{"unknown format", []string{"--config", write("d.ini", "")}, nil, `unknown format ".ini"; use .toml, .yaml or .json`},
		{"positional", []string{"extra"}, nil, `unexpected argument "extra" (flags start with --)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newServeFlagSet(&serveFlags{})
			fs.SetOutput(new(bytes.Buffer))
			_, err := configure(fs, tt.args, func(k string) string { return tt.env[k] })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
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
	f := &serveFlags{}
	fs := newServeFlagSet(f)
	sources, err := configure(fs, []string{"--api-key", "sk-secret", "--addr", "0.0.0.0:9"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	printConfig(&out, fs, sources)
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
	if _, err := configure(newServeFlagSet(g), []string{"--config", p}, func(string) string { return "" }); err != nil {
		t.Fatalf("printed config does not load: %v", err)
	}
	if g.addr != "0.0.0.0:9" || g.maxInputs != 2048 {
		t.Fatalf("reloaded %+v", g)
	}
}

// TestConfigurationDocs fails when docs/configuration.md no longer matches the flag
// definitions. Regenerate with: go test ./cmd/embed-stack -run TestConfigurationDocs -update
func TestConfigurationDocs(t *testing.T) {
	want := configurationDoc(newServeFlagSet(&serveFlags{}))
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

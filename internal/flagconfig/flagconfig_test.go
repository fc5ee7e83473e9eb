package flagconfig

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// settings are the flags of newFlagSet.
type settings struct {
	addr      string
	maxInputs int
	strict    bool
	keys      StringList
	apiKey    string
	config    string
}

// newFlagSet is a command's flags in small: a scalar of each kind, a repeatable
// flag, a secret and --config.
func newFlagSet() (*flag.FlagSet, *settings) {
	s := &settings{}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	fs.StringVar(&s.addr, "addr", "127.0.0.1:8080", "")
	fs.IntVar(&s.maxInputs, "max-inputs", 2048, "")
	fs.BoolVar(&s.strict, "strict-model", false, "")
	fs.Var(&s.keys, "model-alias", "")
	fs.StringVar(&s.apiKey, "api-key", "", "")
	fs.StringVar(&s.config, ConfigFlag, "", "")
	return fs, s
}

// TestConfigure: flag > environment > file > default, each value's source
// reported, a repeatable flag from a comma-separated variable or a file's array.
func TestConfigure(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("max_inputs: 7\nstrict-model: true\naddr: file:1\nmodel_alias: [x]\n"), 0o600)
	env := map[string]string{"EMBED_STACK_CONFIG": file, "EMBED_STACK_ADDR": "env:1", "EMBED_STACK_MODEL_ALIAS": "a, b"}
	fs, s := newFlagSet()
	sources, err := Configure(fs, []string{"--max-inputs", "3"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if s.maxInputs != 3 || s.addr != "env:1" || !s.strict || strings.Join(s.keys, "|") != "a|b" || s.apiKey != "" {
		t.Errorf("settings %+v", *s)
	}
	want := map[string]string{"max-inputs": FromFlag, "addr": FromEnv, "model-alias": FromEnv, "strict-model": FromFile, "api-key": FromDefault, ConfigFlag: FromEnv}
	for name, src := range want {
		if sources[name] != src {
			t.Errorf("%s from %s, want %s", name, sources[name], src)
		}
	}
	if EnvName("max-total-tokens") != "EMBED_STACK_MAX_TOTAL_TOKENS" {
		t.Errorf("EnvName = %s", EnvName("max-total-tokens"))
	}
}

// TestPrintReadsBack: Print writes TOML that Configure reads back as the same
// values, each line with its source, secrets redacted.
func TestPrintReadsBack(t *testing.T) {
	fs, _ := newFlagSet()
	sources, err := Configure(fs, []string{"--api-key", "sk-secret", "--model-alias", "a", "--model-alias", "b", "--max-inputs", "9"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	Print(&out, fs, sources)
	text := out.String()
	if strings.Contains(text, "sk-secret") || !strings.Contains(text, `api_key                = "<redacted>"`) ||
		!strings.Contains(text, `model_alias            = ["a", "b"]                               # flag`) ||
		!strings.Contains(text, "max_inputs             = 9                                        # flag") ||
		!strings.Contains(text, `addr                   = "127.0.0.1:8080"                         # default`) {
		t.Fatalf("printed:\n%s", text)
	}
	file := filepath.Join(t.TempDir(), "p.toml")
	os.WriteFile(file, []byte(strings.ReplaceAll(text, `"<redacted>"`, `"sk-other"`)), 0o600)
	fs2, s2 := newFlagSet()
	if _, err := Configure(fs2, []string{"--config", file}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if s2.maxInputs != 9 || strings.Join(s2.keys, "|") != "a|b" || s2.apiKey != "sk-other" {
		t.Errorf("read back %+v", *s2)
	}
	for name, secret := range map[string]bool{"api-key": true, "hf-token": true, "max-input-tokens": false, "token-ids": false} {
		if Secret(name) != secret {
			t.Errorf("Secret(%q) = %v", name, !secret)
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
			fs, _ := newFlagSet()
			_, err := Configure(fs, tt.args, func(k string) string { return tt.env[k] })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

package flagconfig

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// settings are the flags of newSet.
type settings struct {
	addr, apiKey, config string
	maxInputs, decode    int
	strict               bool
	keys                 []string
	grace                time.Duration
}

// newSet is a command's flags in small: a scalar of each kind, a repeatable flag, a
// secret, a renamed flag, bounds and --config, in two groups.
func newSet() (*Set, *settings) {
	v := &settings{}
	s := New("test", "test --addr HOST:PORT [flags]", "Tests.")
	s.Env = true
	s.Group("Essentials")
	s.String(&v.addr, "addr", "HOST:PORT", "127.0.0.1:8080", "address to listen on").Also("port")
	s.String(&v.config, ConfigFlag, "FILE", "", "settings file")
	s.Group("Limits")
	s.Int(&v.maxInputs, "max-inputs", "N", 2048, "most inputs").AtLeast(1)
	s.Int(&v.decode, "decode-tokens", "N", 0, "tokens per decode call").AtLeast(0).Old("batch-tokens")
	s.Bool(&v.strict, "strict-model", false, "refuse other names")
	s.List(&v.keys, "model-alias", "NAME", "another name")
	s.String(&v.apiKey, "api-key", "KEY", "", "the key")
	s.Duration(&v.grace, "shutdown-grace", "", 30*time.Second, "grace").AtLeast(1).More("Only in the docs.")
	return s, v
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestPrecedence: flag > environment > file > default, each value's source
// reported, a repeatable flag from a comma-separated variable or a file's array.
func TestPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("max_inputs: 7\nstrict-model: true\naddr: file:1\nmodel_alias: [x]\nunknown_to_us: 1\n"), 0o600)
	s, v := newSet()
	s.Shared = []string{"unknown-to-us"}
	err := s.Parse([]string{"--max-inputs", "3"}, env(map[string]string{"EMBED_STACK_CONFIG": file, "EMBED_STACK_ADDR": "env:1", "EMBED_STACK_MODEL_ALIAS": "a, b"}))
	if err != nil {
		t.Fatal(err)
	}
	if v.maxInputs != 3 || v.addr != "env:1" || !v.strict || strings.Join(v.keys, "|") != "a|b" || v.apiKey != "" {
		t.Errorf("settings %+v", *v)
	}
	want := map[string]string{"max-inputs": FromFlag, "addr": FromEnv, "model-alias": FromEnv, "strict-model": FromFile, "api-key": FromDefault, ConfigFlag: FromEnv}
	for name, src := range want {
		if s.Source(name) != src {
			t.Errorf("%s from %s, want %s", name, s.Source(name), src)
		}
	}
	if EnvName("max-total-tokens") != "EMBED_STACK_MAX_TOTAL_TOKENS" {
		t.Errorf("EnvName = %s", EnvName("max-total-tokens"))
	}
}

// TestGNUFlags: --name value, --name=value, a bare --switch, --switch=false, and
// Go's -name for compatibility.
func TestGNUFlags(t *testing.T) {
	s, v := newSet()
	if err := s.Parse([]string{"--addr=a:1", "-max-inputs", "5", "--strict-model", "-decode-tokens=9"}, nil); err != nil {
		t.Fatal(err)
	}
	if v.addr != "a:1" || v.maxInputs != 5 || !v.strict || v.decode != 9 {
		t.Errorf("settings %+v", *v)
	}
	s, v = newSet()
	if err := s.Parse([]string{"--strict-model=false"}, nil); err != nil || v.strict {
		t.Errorf("--strict-model=false: %v, %v", err, v.strict)
	}
}

// TestOldNames: a renamed flag's old name works on the command line, in the
// environment and in a file, each with a warning, and its source is the new name's.
func TestOldNames(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(file, []byte("batch_tokens = 64\n"), 0o600)
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
		src  string
	}{
		{[]string{"--batch-tokens", "16"}, nil, "test: warning: --batch-tokens is now --decode-tokens; the old name still works\n", FromFlag},
		{nil, map[string]string{"EMBED_STACK_BATCH_TOKENS": "32"}, "test: warning: EMBED_STACK_BATCH_TOKENS is now EMBED_STACK_DECODE_TOKENS; the old name still works\n", FromEnv},
		{[]string{"--config", file}, nil, "test: warning: config file " + file + ": batch_tokens is now decode_tokens; the old name still works\n", FromFile},
	} {
		s, v := newSet()
		var warn bytes.Buffer
		s.Stderr = &warn
		if err := s.Parse(c.args, env(c.env)); err != nil {
			t.Fatal(err)
		}
		if warn.String() != c.want || v.decode == 0 || s.Source("decode-tokens") != c.src {
			t.Errorf("%v %v: decode %d from %s, warning %q; want %q from %s", c.args, c.env, v.decode, s.Source("decode-tokens"), warn.String(), c.want, c.src)
		}
	}
}

// TestPrintReadsBack: Print writes TOML that Parse reads back as the same values,
// each line with its source, secrets redacted, old names left out.
func TestPrintReadsBack(t *testing.T) {
	s, _ := newSet()
	if err := s.Parse([]string{"--api-key", "sk-secret", "--model-alias", "a", "--model-alias", "b", "--max-inputs", "9", "--shutdown-grace", "1m"}, nil); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s.Print(&out)
	const want = `addr                   = "127.0.0.1:8080"                         # default
api_key                = "<redacted>"                             # flag
decode_tokens          = 0                                        # default
max_inputs             = 9                                        # flag
model_alias            = ["a", "b"]                               # flag
shutdown_grace         = "1m"                                     # flag
strict_model           = false                                    # default
`
	if out.String() != want {
		t.Fatalf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
	file := filepath.Join(t.TempDir(), "p.toml")
	os.WriteFile(file, []byte(strings.ReplaceAll(out.String(), `"<redacted>"`, `"sk-other"`)), 0o600)
	s2, v2 := newSet()
	if err := s2.Parse([]string{"--config", file}, nil); err != nil {
		t.Fatal(err)
	}
	if v2.maxInputs != 9 || strings.Join(v2.keys, "|") != "a|b" || v2.apiKey != "sk-other" || v2.grace != time.Minute {
		t.Errorf("read back %+v", *v2)
	}
	for name, secret := range map[string]bool{"api-key": true, "hf-token": true, "max-input-tokens": false, "token-ids": false} {
		if Secret(name) != secret {
			t.Errorf("Secret(%q) = %v", name, !secret)
		}
	}
}

// TestErrors: every refusal, as Report shows it, with its exit status.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	const usage = "Usage: test --addr HOST:PORT [flags]\nRun 'test --help' for every flag.\n"
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"typo", []string{"--max-input", "3"}, nil, "test: unknown flag --max-input; did you mean --max-inputs?\n" + usage},
		{"swapped letters", []string{"--adrd", "x"}, nil, "test: unknown flag --adrd; did you mean --addr?\n" + usage},
		{"another word", []string{"--port", "80"}, nil, "test: unknown flag --port; did you mean --addr?\n" + usage},
		{"nothing near", []string{"--zzz"}, nil, "test: unknown flag --zzz\n" + usage},
		{"single dash typo", []string{"-adr", "x"}, nil, "test: unknown flag -adr; did you mean --addr?\n" + usage},
		{"missing value", []string{"--max-inputs"}, nil, "test: --max-inputs needs a value: --max-inputs N\n" + usage},
		{"positional", []string{"extra"}, nil, "test: unexpected argument \"extra\" (flags start with --)\n" + usage},
		{"bad value", []string{"--max-inputs", "many"}, nil, "test: --max-inputs \"many\": not a whole number\n"},
		{"bad switch", []string{"--strict-model=maybe"}, nil, "test: --strict-model \"maybe\": not true or false\n"},
		{"below bound", []string{"--max-inputs", "0"}, nil, "test: --max-inputs must be at least 1; got 0\n"},
		{"negative", []string{"--decode-tokens", "-1"}, nil, "test: --decode-tokens must not be negative; got -1\n"},
		{"not positive", []string{"--shutdown-grace", "0s"}, nil, "test: --shutdown-grace must be positive; got 0s\n"},
		{"bound from env", nil, map[string]string{"EMBED_STACK_MAX_INPUTS": "0"}, "test: --max-inputs must be at least 1; got 0 (from EMBED_STACK_MAX_INPUTS)\n"},
		{"bad env value", nil, map[string]string{"EMBED_STACK_MAX_INPUTS": "many"}, "test: EMBED_STACK_MAX_INPUTS=\"many\": not a whole number\n"},
		{"unknown file key", []string{"--config", write("a.yaml", "max_input: 3\n")}, nil,
			"test: config file " + dir + "/a.yaml: unknown setting \"max_input\" (did you mean max_inputs? the settings are the flags of --help, without the dashes)\n"},
		{"bad file value", []string{"--config", write("b.json", `{"max_inputs": "x"}`)}, nil, "test: config file " + dir + "/b.json: max_inputs = \"x\": not a whole number\n"},
		{"list for a scalar", []string{"--config", write("c.toml", "addr = [\"a\", \"b\"]\n")}, nil, "test: config file " + dir + "/c.toml: addr takes one value, not a list\n"},
		{"unknown format", []string{"--config", write("d.ini", "")}, nil, "test: config file " + dir + "/d.ini: unknown format \".ini\"; use .toml, .yaml or .json\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSet()
			var stdout, stderr bytes.Buffer
			status := Report(s.Parse(tt.args, env(tt.env)), "test", &stdout, &stderr)
			if status != 2 || stderr.String() != tt.want || stdout.Len() > 0 {
				t.Errorf("status %d, stderr:\n%s\nwant 2 and:\n%s", status, stderr.String(), tt.want)
			}
		})
	}
}

// TestHelp: the synopsis, the groups in definition order, placeholders, defaults
// (none for zero values), the flag column no wider than maxNameWidth (a longer flag
// has its help on the next line), the environment note.
func TestHelp(t *testing.T) {
	s, _ := newSet()
	var stdout, stderr bytes.Buffer
	err := s.Parse([]string{"--help"}, nil)
	if !errors.Is(err, ErrHelp) || Report(err, "test", &stdout, &stderr) != 0 || stderr.Len() > 0 {
		t.Fatalf("--help: %v, stderr %q", err, stderr.String())
	}
	const want = `Usage: test --addr HOST:PORT [flags]

Tests.

Essentials:
  --addr HOST:PORT    address to listen on (default 127.0.0.1:8080)
  --config FILE       settings file

Limits:
  --max-inputs N      most inputs (default 2048)
  --decode-tokens N   tokens per decode call
  --strict-model      refuse other names
  --model-alias NAME  another name
  --api-key KEY       the key
  --shutdown-grace DURATION
                      grace (default 30s)

Every flag is also an environment variable (--max-inputs: EMBED_STACK_MAX_INPUTS),
and a key of the --config file (max_inputs); a flag wins over both.
`
	if stdout.String() != want {
		t.Errorf("help:\n%s\nwant:\n%s", stdout.String(), want)
	}
	var md bytes.Buffer
	s.Markdown(&md, "##")
	for _, line := range []string{
		"\n## Limits\n\n| flag | environment | file key | default | meaning |\n",
		"| `--shutdown-grace` | `EMBED_STACK_SHUTDOWN_GRACE` | `shutdown_grace` | `30s` | grace. Only in the docs. |\n",
		"| `--batch-tokens` (`EMBED_STACK_BATCH_TOKENS`, `batch_tokens`) | `--decode-tokens` |\n",
	} {
		if !strings.Contains(md.String(), line) {
			t.Errorf("markdown lacks %q:\n%s", line, md.String())
		}
	}
	if got := wrap("one two three four", 9); strings.Join(got, "|") != "one two|three|four" {
		t.Errorf("wrap = %q", got)
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"model", "model-name", "max-inputs", "max-input-tokens", "addr"}
	for typed, want := range map[string]string{"modle": "model", "max-input": "max-inputs,max-input-tokens", "mdl": "", "xyz": "", "add": "addr"} {
		if got := strings.Join(Suggest(typed, names), ","); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", typed, got, want)
		}
	}
}

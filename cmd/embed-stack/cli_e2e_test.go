package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// runCLI runs the binary with args in a temporary directory (outside the source
// tree) with env added to a clean environment, and returns its exit status, stdout
// and stderr.
func runCLI(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	// Only PATH is kept from this process's environment (taken from os.Environ,
	// which passes it on, rather than read: tests read through internal/testenv).
	keep := slices.DeleteFunc(os.Environ(), func(kv string) bool { return !strings.HasPrefix(kv, "PATH=") })
	cmd.Env = append(append(keep, "HOME="+cmd.Dir, "HF_HUB_OFFLINE=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return e2e.ExitCode(cmd.Run()), stdout.String(), stderr.String()
}

// TestCLIHelp: `serve --help` goes to stdout with status 0; its first screen (24
// lines) holds what a newcomer needs (--model, --addr, --api-key), every flag is
// printed GNU-style as --name with a placeholder, the groups come in their order,
// and a default is the real one (--default-input-type's is document, issue 27).
func TestCLIHelp(t *testing.T) {
	bin, _ := e2e.Paths(t)
	code, out, errOut := runCLI(t, bin, nil, "serve", "--help")
	if code != 0 || errOut != "" {
		t.Fatalf("serve --help: exit %d, stderr %q; want 0 and nothing", code, errOut)
	}
	lines := strings.Split(out, "\n")
	if lines[0] != "Usage: embed-stack serve --model MODEL [flags]" {
		t.Errorf("first line %q, want the synopsis", lines[0])
	}
	first := strings.Join(lines[:24], "\n")
	for _, want := range []string{"\nEssentials:\n", "\n  --model MODEL ", "\n  --addr HOST:PORT ", "\n  --api-key KEY "} {
		if !strings.Contains(first, want) {
			t.Errorf("the first 24 lines lack %q:\n%s", want, first)
		}
	}
	var groups []string
	flags := 0
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "  --"):
			flags++
		case strings.HasPrefix(l, "  -"):
			t.Errorf("a flag not printed as --name: %q", l)
		case strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " "):
			groups = append(groups, strings.TrimSuffix(l, ":"))
		}
	}
	wantGroups := "Essentials|Models and their names|Pooling and prompts, per model|Requests|Limits of one request|Cache|Workers (llama.cpp)|" +
		"Batching across requests|Long inputs (ephemeral workers)|HTTP server|Observability"
	if got := strings.Join(groups, "|"); got != wantGroups {
		t.Errorf("groups %s\nwant %s", got, wantGroups)
	}
	if n := len(newServeFlagSet(&serveFlags{}).Names()); flags != n {
		t.Errorf("help lists %d flags, the table defines %d", flags, n)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"--default-input-type TYPE input_type of requests that give none: document, or query (embedded with the instruction; default document)",
		"--keep-alive [MODEL=]DURATION unload a model idle this long (Ollama's keep_alive, not HTTP's)",
		"--decode-tokens N tokens per llama.cpp decode call of the warm worker",
		"--batch-max-tokens N most tokens in one shared call of the warm worker (default 2048)",
		"--pooling [MODEL=]MODE how vectors are pooled from the token states: mean, cls (the first token's) or last (the last token's)",
		"Every flag is also an environment variable (--max-inputs: EMBED_STACK_MAX_INPUTS), and a key of the --config file (max_inputs); a flag wins over both.",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// TestCLIBadFlag: a typo gets three lines on stderr, the error with the nearest
// flag, the synopsis and the pointer to --help, status 2 and nothing on stdout
// (it printed 114 lines of help, the error first, scrolled away); an unknown
// command gets the nearest command.
func TestCLIBadFlag(t *testing.T) {
	bin, _ := e2e.Paths(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--modle", "m.gguf"}, "embed-stack serve: unknown flag --modle; did you mean --model?\n" +
			"Usage: embed-stack serve --model MODEL [flags]\nRun 'embed-stack serve --help' for every flag.\n"},
		{[]string{"embed", "--modle", "m.gguf"}, "embed-stack embed: unknown flag --modle; did you mean --model?\n" +
			"Usage: embed-stack embed --model MODEL --input FILE --output FILE [flags]\nRun 'embed-stack embed --help' for every flag.\n"},
		{[]string{"serve", "--model"}, "embed-stack serve: --model needs a value: --model MODEL\n" +
			"Usage: embed-stack serve --model MODEL [flags]\nRun 'embed-stack serve --help' for every flag.\n"},
		{[]string{"serve", "--model", "m.gguf", "--max-inputs", "many"}, "embed-stack serve: --max-inputs \"many\": not a whole number\n"},
		{[]string{"mrege"}, "embed-stack: unknown command \"mrege\"; did you mean merge?\nRun 'embed-stack --help' for the commands.\n"},
		{[]string{"version", "--json"}, "embed-stack version takes no arguments; got \"--json\"\n"},
	} {
		code, out, errOut := runCLI(t, bin, nil, c.args...)
		if code != 2 || out != "" || errOut != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr:\n%s\nwant exit 2, no stdout and:\n%s", c.args, code, out, errOut, c.want)
		}
	}
}

// TestCLIStartupError: a fatal start-up error is one plain line on stderr, quotes
// unescaped, then serve's exit line (it was a slog record with the error quoted and
// escaped); with --log-format json it stays a JSON record, for log collectors. The
// same holds for embed.
func TestCLIStartupError(t *testing.T) {
	bin, _ := e2e.Paths(t)
	missing := filepath.Join(t.TempDir(), "no such.gguf")
	reason := "--model: model file " + missing + " does not exist (a Hugging Face reference looks like owner/name[:QUANT][@REVISION] or " +
		"owner/name/FILE.gguf[@REVISION]): stat " + missing + ": no such file or directory"

	code, out, errOut := runCLI(t, bin, nil, "serve", "--model", missing, "--addr", e2e.FreeAddr(t))
	errLine, rest, _ := strings.Cut(errOut, "\n")
	if code != 1 || out != "" || errLine != "embed-stack serve: "+reason || !strings.HasSuffix(rest, " level=INFO msg=exit status=1\n") || strings.Count(rest, "\n") != 1 {
		t.Errorf("serve: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and the line\nembed-stack serve: %s\nthen the exit line", code, out, errOut, reason)
	}

	code, _, errOut = runCLI(t, bin, nil, "serve", "--model", missing, "--addr", e2e.FreeAddr(t), "--log-format", "json")
	var rec struct{ Level, Msg, Error string }
	first, _, _ := strings.Cut(errOut, "\n")
	if err := json.Unmarshal([]byte(first), &rec); code != 1 || err != nil || rec != (struct{ Level, Msg, Error string }{"ERROR", "embed-stack serve failed", reason}) {
		t.Errorf("serve --log-format json: exit %d, stderr:\n%s\nwant exit 1 and the record of %q", code, errOut, reason)
	}

	code, _, errOut = runCLI(t, bin, nil, "embed", "--model", missing, "--input", "-", "--output", "v.npy")
	if want := "embed-stack embed: " + reason + "\n"; code != 1 || errOut != want {
		t.Errorf("embed: exit %d, stderr:\n%s\nwant exit 1 and\n%s", code, errOut, want)
	}
}

// TestCLIConfigSources: flag > EMBED_STACK_* > file > default, as --print-config
// shows them through the binary for serve and embed, secrets redacted; a renamed
// flag's old name still works in all three places, with a warning.
func TestCLIConfigSources(t *testing.T) {
	bin, _ := e2e.Paths(t)
	file := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(file, []byte("max_total_tokens = 1000\nthreads = 7\nbatch_tokens = 64\nbatch_size = 8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"EMBED_STACK_THREADS=5", "EMBED_STACK_MAX_INPUTS=9"}
	code, out, errOut := runCLI(t, bin, env, "serve", "--print-config", "--config", file, "--threads", "3", "--model", "m.gguf", "--api-key", "sk-x")
	wantErr := "embed-stack serve: warning: config file " + file + ": batch_tokens is now decode_tokens; the old name still works\n"
	if code != 0 || errOut != wantErr {
		t.Errorf("serve --print-config: exit %d, stderr:\n%s\nwant 0 and\n%s", code, errOut, wantErr)
	}
	var set []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasSuffix(l, "# default") {
			set = append(set, strings.Join(strings.Fields(l), " "))
		}
	}
	want := `api_key = "<redacted>" # flag|decode_tokens = 64 # file|max_inputs = 9 # env|max_total_tokens = 1000 # file|model = ["m.gguf"] # flag|threads = 3 # flag`
	if got := strings.Join(set, "|"); got != want {
		t.Errorf("serve --print-config, the settings not at their defaults:\n%s\nwant\n%s", got, want)
	}

	code, out, errOut = runCLI(t, bin, append(env, "EMBED_STACK_BATCH_TOKENS=12"), "embed", "--print-config", "--config", file, "--model", "m.gguf")
	if !strings.Contains(out, "\nbatch_size ") || !strings.Contains(out, "# file\n") || code != 0 ||
		!strings.Contains(errOut, "EMBED_STACK_BATCH_TOKENS is now EMBED_STACK_DECODE_TOKENS; the old name still works") {
		t.Errorf("embed --print-config: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		got := f[0] + "=" + f[2] + " " + f[len(f)-1]
		switch f[0] {
		case "max_total_tokens", "max_inputs":
			t.Errorf("embed prints serve's setting %q", l)
		case "threads":
			if got != "threads=5 env" {
				t.Errorf("embed: %q, want threads 5 from the environment (env > file)", l)
			}
		case "batch_size":
			if got != "batch_size=8 file" {
				t.Errorf("embed: %q, want batch_size 8 from the file", l)
			}
		case "decode_tokens":
			if got != "decode_tokens=12 env" {
				t.Errorf("embed: %q, want decode_tokens 12 from the environment (flag > env > file)", l)
			}
		}
	}
}

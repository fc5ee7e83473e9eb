package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestPrintConfigWithoutModel: --print-config still prints and exits 0 without a
// model, but says on stderr that serve would refuse to start.
func TestPrintConfigWithoutModel(t *testing.T) {
	bin, model := e2e.Paths(t)
	for _, c := range []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"serve", "--print-config"}, printConfigNoModel + "\n"},
		{[]string{"serve", "--print-config", "--model", model}, ""},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = withoutEnv("EMBED_STACK_")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, stderr.String())
		}
		if stderr.String() != c.wantStderr {
			t.Errorf("%v: stderr %q, want %q", c.args, stderr.String(), c.wantStderr)
		}
		if !strings.Contains(stdout.String(), "\nmodel ") {
			t.Errorf("%v: no model line in\n%s", c.args, stdout.String())
		}
	}
	const want = "embed-stack serve: warning: no model is set (--model, EMBED_STACK_MODEL or model in the --config file); serve would refuse to start with this configuration"
	if printConfigNoModel != want {
		t.Errorf("warning %q, want %q", printConfigNoModel, want)
	}
}

func withoutEnv(prefix string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, prefix) {
			env = append(env, e)
		}
	}
	return env
}

// TestVersionStamped: the binary `make build` writes reports the version the
// Makefile stamped (git describe; never the "dev" of a plain go build) and the
// commit the toolchain recorded.
func TestVersionStamped(t *testing.T) {
	bin, _ := e2e.Paths(t)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^embed-stack (\S+) \(commit ([0-9a-f]{12})(\+dirty)?, go\S+\)\n$`).FindStringSubmatch(string(out))
	if m == nil || m[1] == "dev" {
		t.Fatalf("--version printed %q; want a stamped version and a commit (built by `make build` in a git checkout)", out)
	}
}

// TestServeLifecycleLog: with JSON logs, probes are not logged at the default
// level, the start-up line sizes the ephemeral workers sensibly for the tiny model,
// and after "shutting down" the log says that the requests drained, the warm
// worker stopped and the process exited, in that order.
func TestServeLifecycleLog(t *testing.T) {
	s := e2e.Serve(t, "--log-format", "json", "--shutdown-grace", "7s")
	e2e.Embeddings(t, s.URL, map[string]any{"input": "one request"})
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM\n%s", s.Out)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("exit: %v\n%s", err, s.Out)
	}
	var msgs []string
	lines := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(s.Out.String()))
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue // a worker's own output
		}
		msg, _ := l["msg"].(string)
		if msg == "request" && l["path"] != "/v1/embeddings" {
			t.Errorf("a probe logged at the default level: %s", sc.Text())
		}
		msgs = append(msgs, msg)
		lines[msg] = l
	}
	order := []string{"shutting down", "requests drained", "warm worker stopped", "exit"}
	at := -1
	for _, want := range order {
		i := indexFrom(msgs, want, at+1)
		if i < 0 {
			t.Fatalf("no %q after the lines before it in %q\n%s", want, msgs, s.Out)
		}
		at = i
	}
	if g := lines["shutting down"]["grace"]; g != "7s" {
		t.Errorf("grace logged as %v, want \"7s\"", g)
	}
	if d, ok := lines["requests drained"]["duration"].(string); !ok {
		t.Errorf("drain duration %v, want a duration string", lines["requests drained"]["duration"])
	} else if _, err := time.ParseDuration(d); err != nil {
		t.Errorf("drain duration %q: %v", d, err)
	}
	if st := lines["exit"]["status"]; st != 0.0 {
		t.Errorf("exit status logged as %v, want 0", st)
	}
	eph := lines["ephemeral workers"]
	basis, _ := eph["basis"].(string)
	max, _ := eph["max"].(float64)
	if tokens := eph["max_tokens"]; tokens != max*32768 || !strings.Contains(basis, " at 256 bytes of KV cache per token ") {
		t.Errorf("ephemeral workers: max %v, max_tokens %v, basis %q; want max_tokens = max x 32768 (--max-input-tokens) and the tiny model's 256 bytes per token", max, tokens, basis)
	}
}

func indexFrom(s []string, v string, from int) int {
	for i := from; i < len(s); i++ {
		if s[i] == v {
			return i
		}
	}
	return -1
}

package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// noHubAdvice is how the message of a model that cannot come from the Hub ends: what
// to do on a machine without Hub access.
const noHubAdvice = ". Without access to the Hub, set HF_ENDPOINT to a mirror you can reach, or serve a local GGUF file: " +
	"--model path/to/model.gguf (make run MODEL=path/to/model.gguf; make run MODEL=models/tiny.gguf " +
	"builds and serves a small random-weight test model with no download)"

// noHubFailFast bounds how long serve may take to give up when the Hub is unreachable
// (it took about 0.1 s with the connection refused).
const noHubFailFast = 5 * time.Second

// serveLimit and makeRunLimit bound a run of TestServeWithoutHub that does not
// fail as it should; `make run` may first build the binary (llama.cpp cold takes
// minutes on two cores).
const (
	serveLimit   = 2 * time.Minute
	makeRunLimit = 15 * time.Minute
)

// TestServeWithoutHub: with no Hub to reach (HF_ENDPOINT at a closed local port) and
// an empty cache, `serve` with `make run`'s default model exits 1 within seconds, and
// its one error line says what was tried, what failed, and the ways out: HF_ENDPOINT,
// HF_HUB_OFFLINE, a local GGUF file and `make run MODEL=models/tiny.gguf`. Offline
// mode with an empty cache ends the same way. `make run` itself (the README's command)
// shows the same line.
func TestServeWithoutHub(t *testing.T) {
	bin, _ := e2e.Paths(t)
	endpoint := "http://" + e2e.FreeAddr(t) // nothing listens there any more
	const ref = officialRepo + ":f16"
	// serve ends every run with its exit line (TestServeLifecycleLog).
	const exitLine = `time=\S+ level=INFO msg=exit status=1`
	refused := `^embed-stack serve: --model: cannot reach the hub at ` + regexp.QuoteMeta(endpoint) +
		` to list the files of ` + regexp.QuoteMeta(officialRepo) + `: Get "` + regexp.QuoteMeta(endpoint) +
		`/api/models/` + regexp.QuoteMeta(officialRepo) + `/revision/main": dial tcp [0-9.:]+: connect: connection refused` +
		regexp.QuoteMeta(`; check the network, a proxy (HTTPS_PROXY) or HF_ENDPOINT; to use only models already in the cache, set HF_HUB_OFFLINE=1`+noHubAdvice) + "\n" + exitLine + "\n$"

	// run runs a command to its failure within limit. It runs in its own process
	// group (e2e.Start), which is killed whole at the limit: `make run` with a cold
	// build cache leaves compiler children behind a killed make, and they would
	// hold the output pipe open, and the test, for as long as they compile.
	run := func(t *testing.T, limit time.Duration, env []string, args ...string) (string, time.Duration) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = e2e.RepoRoot(t)
		cmd.Env = env
		start := time.Now()
		p := e2e.Start(t, cmd)
		timer := time.NewTimer(limit)
		defer timer.Stop()
		timedOut := false
		select {
		case <-p.Done():
		case <-timer.C:
			timedOut = true
			p.Kill()
		}
		took := time.Since(start)
		if code := e2e.ExitCode(p.Err()); code == 0 || timedOut {
			t.Fatalf("%s: exit %d (%v) after %s (limit %s), want a failure\n%s", strings.Join(args, " "), code, p.Err(), took, limit, p.Out)
		}
		return p.Out.String(), took
	}

	t.Run("unreachable", func(t *testing.T) {
		env := hubEnv(endpoint, t.TempDir())
		out, took := run(t, serveLimit, env, bin, "serve", "--model", ref, "--addr", e2e.FreeAddr(t))
		if took > noHubFailFast {
			t.Errorf("serve gave up after %s, want < %s", took, noHubFailFast)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 || !regexp.MustCompile(refused).MatchString(out) {
			t.Errorf("output:\n%s\nwant the error line and the exit line, matching\n%s", out, refused)
		}
	})

	t.Run("offline, empty cache", func(t *testing.T) {
		cache := t.TempDir()
		env := append(hubEnv(endpoint, cache), "HF_HUB_OFFLINE=1")
		out, took := run(t, serveLimit, env, bin, "serve", "--model", ref, "--addr", e2e.FreeAddr(t))
		if took > noHubFailFast {
			t.Errorf("serve gave up after %s, want < %s", took, noHubFailFast)
		}
		want := `embed-stack serve: --model: ` + officialRepo + ` (revision main) is not in the Hugging Face cache at ` + cache +
			`; offline mode is on (HF_HUB_OFFLINE=1): unset HF_HUB_OFFLINE and run once with network access to download it, or pass the path of a local .gguf file` +
			noHubAdvice + "\n"
		errLine, last, _ := strings.Cut(out, "\n")
		if errLine+"\n" != want || !regexp.MustCompile("^"+exitLine+"\n$").MatchString(last) {
			t.Errorf("output:\n%s\nwant the line\n%s\nthen the exit line", out, want)
		}
	})

	// From a release archive or in the container there is no `make run`: the advice
	// says what applies there (inContainer decides between the two, as here).
	t.Run("outside the source tree", func(t *testing.T) {
		env := hubEnv(endpoint, t.TempDir())
		cmd := exec.Command(bin, "serve", "--model", ref, "--addr", e2e.FreeAddr(t))
		cmd.Dir, cmd.Env = t.TempDir(), env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if code := e2e.ExitCode(cmd.Run()); code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, stderr.String())
		}
		advice := ". Without access to the Hub, set HF_ENDPOINT to a mirror you can reach, or serve a local GGUF file: --model path/to/model.gguf"
		if inContainer() {
			advice += " in a directory mounted into the container (docker run -v DIR:/models ... serve --model /models/model.gguf), " +
				"or fill the Hugging Face cache volume with `embed-stack pull REF` where the Hub is reachable\n"
		} else {
			advice += ", or run `embed-stack pull REF` where the Hub is reachable and copy its Hugging Face cache (HF_HOME) here\n"
		}
		errLine, _, _ := strings.Cut(stderr.String(), "\n")
		if !strings.HasPrefix(errLine, "embed-stack serve: --model: cannot reach the hub at ") || !strings.HasSuffix(errLine+"\n", advice) {
			t.Errorf("stderr:\n%s\nwant the error line ending\n%s", stderr.String(), advice)
		}
	})

	t.Run("make run", func(t *testing.T) {
		if _, err := exec.LookPath("make"); err != nil {
			e2e.Require(t, "make is not installed")
		}
		out, _ := run(t, makeRunLimit, hubEnv(endpoint, t.TempDir()), "make", "-s", "run", "ADDR="+e2e.FreeAddr(t))
		// make adds its own line about the failed recipe.
		got, _, _ := strings.Cut(out, "\nmake: ")
		if !regexp.MustCompile(refused).MatchString(got + "\n") {
			t.Errorf("make run output:\n%s\nwant the serve line matching\n%s", out, refused)
		}
	})
}

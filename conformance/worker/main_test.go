package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

const (
	// defaultCmd is the worker tested when WORKER_CMD is unset: the Go llama.cpp worker
	// on the generated test model (`make build models`).
	defaultCmd = "bin/embed-stack worker --model models/tiny.gguf"
	// defaultCosineMin is the least cosine a worker's vector may have with the float64
	// reference (or with worker B): the Go worker computes in float32 and meets it with
	// a wide margin on the tiny model.
	defaultCosineMin = 0.9999
	// qwen3Vocab is Qwen3's vocabulary size (151643 BPE tokens and 26 special ones).
	qwen3Vocab = 151669
	// eosID is <|endoftext|>, which the server appends to every sequence it embeds.
	eosID = 151643

	// exitBound is how long a worker may take to exit after stdin EOF or SIGTERM when
	// no request is in flight. Both workers drain requests for at most 5 s.
	exitBound = 10 * time.Second
	// requestTimeout bounds one /embed request: an 8192-token sequence through the
	// 0.6B model on a laptop CPU (worker B in the MLX comparison) takes tens of seconds.
	requestTimeout = 5 * time.Minute
	// outputTail is how much of a worker's stderr and stdout failure messages quote.
	outputTail = 16 << 10
)

// suite is the configuration read from the environment by TestMain.
var suite struct {
	repoRoot     string
	cmdA         []string // WORKER_CMD, split
	cmdB         []string // WORKER_CMD_B, split; nil when there is no comparison
	refPath      string   // REFERENCE_GGUF, absolute; "" for none
	cosineMin    float64
	vocab        int
	modelName    string // the exact "model" /health must report; "" for any non-empty one
	readyTimeout time.Duration

	// sockDir is the private directory holding every worker's socket.
	sockDir string
	// skipReason is non-empty when the default worker's binary or model is missing.
	skipReason string
}

// TestMain runs the suite with the weights the binary converts at load kept out of
// the user's cache (e2e.Run).
func TestMain(m *testing.M) {
	os.Exit(e2e.Run(func() int { return runMain(m) }))
}

func runMain(m *testing.M) int {
	if err := configure(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance/worker:", err)
		return 1
	}
	if suite.skipReason != "" && testenv.RequireE2E() {
		fmt.Fprintln(os.Stderr, "conformance/worker: EMBED_STACK_REQUIRE_E2E=1 and "+suite.skipReason)
		return 1
	}
	dir, err := socketDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance/worker:", err)
		return 1
	}
	suite.sockDir = dir
	code := m.Run()
	if err := stopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance/worker: FAIL:", err)
		if code == 0 {
			code = 1
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, "conformance/worker: removing", dir+":", err)
	}
	return code
}

// configure reads the environment into suite.
func configure() error {
	root, err := testrepo.Root()
	if err != nil {
		return err
	}
	suite.repoRoot = root

	cmdLine, custom := testenv.Lookup("WORKER_CMD")
	if !custom || strings.TrimSpace(cmdLine) == "" {
		cmdLine, custom = defaultCmd, false
	}
	if suite.cmdA, err = splitCommand(cmdLine); err != nil {
		return fmt.Errorf("WORKER_CMD: %w", err)
	}
	if len(suite.cmdA) == 0 {
		return errors.New("WORKER_CMD is blank")
	}
	if b := testenv.Get("WORKER_CMD_B"); strings.TrimSpace(b) != "" {
		if suite.cmdB, err = splitCommand(b); err != nil {
			return fmt.Errorf("WORKER_CMD_B: %w", err)
		}
	}

	ref, set := testenv.Lookup("REFERENCE_GGUF")
	if !set && !custom {
		ref = "models/tiny.gguf"
	}
	if ref != "" {
		suite.refPath = fromRoot(ref)
	}

	suite.cosineMin = defaultCosineMin
	if v := testenv.Get("WORKER_COSINE_MIN"); v != "" {
		c, err := strconv.ParseFloat(v, 64)
		if err != nil || !(c > 0 && c <= 1) {
			return fmt.Errorf("WORKER_COSINE_MIN=%q: want a number in (0, 1]", v)
		}
		suite.cosineMin = c
	}

	suite.readyTimeout = 2 * time.Minute
	if v := testenv.Get("WORKER_READY_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("WORKER_READY_TIMEOUT=%q: want a positive Go duration such as 10m", v)
		}
		suite.readyTimeout = d
	}

	if !custom {
		// The default worker needs `make build models`; without them the suite skips
		// (or fails under EMBED_STACK_REQUIRE_E2E=1), as the other conformance suites do.
		var missing []string
		for _, p := range []string{fromRoot(suite.cmdA[0]), fromRoot("models/tiny.gguf")} {
			if _, err := os.Stat(p); err != nil {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			suite.skipReason = fmt.Sprintf("missing %s: run `make build models` first", strings.Join(missing, ", "))
			return nil
		}
	}
	if suite.refPath != "" {
		if _, err := os.Stat(suite.refPath); err != nil {
			return fmt.Errorf("REFERENCE_GGUF: %w", err)
		}
	}

	suite.vocab = qwen3Vocab
	if v := testenv.Get("WORKER_VOCAB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("WORKER_VOCAB=%q: want a positive integer", v)
		}
		suite.vocab = n
	} else if suite.refPath != "" {
		// llama.cpp's vocabulary is the GGUF's token list; a worker of the same model
		// has the same one.
		n, err := ggufVocab(suite.refPath)
		if err != nil {
			return fmt.Errorf("REFERENCE_GGUF: %w", err)
		}
		suite.vocab = n
	}

	suite.modelName = testenv.Get("WORKER_MODEL_NAME")
	if suite.modelName == "" && !custom {
		// embed-stack worker reports the GGUF's general.name.
		f, err := gguf.Open(fromRoot("models/tiny.gguf"))
		if err != nil {
			return fmt.Errorf("reading the default model's name: %w", err)
		}
		defer f.Close()
		if suite.modelName, err = f.String("general.name"); err != nil {
			return fmt.Errorf("reading the default model's name: %w", err)
		}
	}
	return nil
}

// ggufVocab returns the number of tokens in a GGUF's vocabulary.
func ggufVocab(path string) (int, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	toks, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return 0, fmt.Errorf("%w; set WORKER_VOCAB", err)
	}
	return len(toks), nil
}

// fromRoot makes a repository-relative path absolute; an absolute one is kept.
func fromRoot(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(suite.repoRoot, p)
}

// socketDir creates the private directory for the workers' sockets, as serve does. It
// prefers /tmp: sun_path holds 104 bytes on macOS, and $TMPDIR there is already about
// 50.
func socketDir() (string, error) {
	parent := os.TempDir()
	if st, err := os.Stat("/tmp"); err == nil && st.IsDir() {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "wc")
	if err != nil {
		return "", fmt.Errorf("socket directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("socket directory: %w", err)
	}
	return dir, nil
}

// shared holds the long-lived workers: "A" (WORKER_CMD) and "B" (WORKER_CMD_B), each
// started on first use and stopped by stopShared.
var shared = struct {
	sync.Mutex
	byName map[string]*worker
	order  []*worker
}{byName: map[string]*worker{}}

// sharedWorker returns the long-lived worker name ("A" or "B"), starting it on first
// use. It skips the test when the default worker cannot run here.
func sharedWorker(t *testing.T, name string) *worker {
	t.Helper()
	if suite.skipReason != "" {
		t.Skip(suite.skipReason)
	}
	argv := suite.cmdA
	if name == "B" {
		argv = suite.cmdB
	}
	shared.Lock()
	defer shared.Unlock()
	if w, ok := shared.byName[name]; ok {
		if w.startErr != nil {
			t.Fatalf("worker %s failed to start earlier: %v", name, w.startErr)
		}
		select {
		case <-w.done:
			t.Fatalf("worker %s exited earlier: %v\noutput:\n%s", name, w.waitErr, w.out)
		default:
		}
		return w
	}
	w, err := startWorker(name, argv)
	if w == nil {
		t.Fatalf("worker %s: %v", name, err)
	}
	shared.byName[name] = w
	if err != nil {
		w.startErr = err
		t.Fatalf("worker %s: %v", name, err)
	}
	shared.order = append(shared.order, w)
	return w
}

// stopShared stops the long-lived workers by closing their stdin and reports any that
// did not exit cleanly.
func stopShared() error {
	shared.Lock()
	defer shared.Unlock()
	var errs []error
	for _, w := range shared.order {
		if err := w.stopByStdin(exitBound); err != nil {
			errs = append(errs, fmt.Errorf("worker %s: %w\noutput:\n%s", w.name, err, w.out))
		}
	}
	return errors.Join(errs...)
}

// ctxFor returns a context for one request, ended with the test.
func ctxFor(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), requestTimeout)
	t.Cleanup(cancel)
	return c
}

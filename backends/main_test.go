package backends

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/testenv"
)

// The tests start fake workers by re-executing the test binary (os/exec's
// TestHelperProcess pattern): TestMain sees envFakeWorker and runs fakeWorkerMain,
// a real RunWorker with a fake engine, instead of the tests. Environment switches
// make it misbehave:
//
//	FAKE_RECORD_DIR=dir           write the command line to dir/<pid>.args
//	FAKE_CRASH_AT_START=msg       print msg to stderr and exit 3 before listening
//	FAKE_CRASH_AT_START_IF=path   ... but only while path exists
//	FAKE_LOAD_FAIL=msg            the load function fails with msg
//	FAKE_LOAD_DELAY=dur           the load takes dur
//	FAKE_LOAD_PROGRESS=1          ... printing a line to stderr every 20ms meanwhile
//	FAKE_NEVER_READY=1            the load never returns (and prints nothing)
//	FAKE_WEDGE_ON_EXIT=1          never exit after RunWorker returns, as a worker
//	                              stuck in native teardown (only SIGKILL ends it)
//	FAKE_CRASH_ONCE_FILE=path     token tokCrash aborts the worker only if path does
//	                              not exist yet (it is created first)
//	FAKE_SLOW_RESTART=dur         the load takes dur if FAKE_CRASH_ONCE_FILE exists
//
// Tokens with special meaning to the fake engine (in a child only): tokCrash aborts
// the process like a GGML_ASSERT; tokHang blocks forever, ignoring its context.
// In every fake engine, ids >= fakeVocab are input errors and tokFail fails the
// engine.
const envFakeWorker = "BACKENDS_FAKE_WORKER"

const (
	fakeNEmbd = 8
	fakeVocab = 1000
	tokFail   = 999
	tokCrash  = 998
	tokHang   = 997
	fakeModel = "fake.gguf"
	// fakeDefaultCtx is the fake worker's --ctx default, as the real one has 8192.
	fakeDefaultCtx = 512
)

func TestMain(m *testing.M) {
	if testenv.Get(envFakeWorker) == "1" {
		os.Exit(fakeWorkerMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeVector is the fake engine's embedding: a deterministic function of every id
// and its position, exactly representable in float32 (multiples of 1/4 below 2^20).
func fakeVector(seq []int32) []float32 {
	v := make([]float32, fakeNEmbd)
	v[0] = float32(len(seq))
	for j := 1; j < fakeNEmbd; j++ {
		var h int64
		for i, t := range seq {
			h = (h + int64(t+1)*int64(i+j+1)) % 1_000_003
		}
		v[j] = float32(h)/4 + float32(j)/4
	}
	return v
}

// fakeEngine embeds with fakeVector. child enables the process-level misbehaviour.
type fakeEngine struct {
	child     bool
	crashOnce string

	// embedHook, when set (in-process tests), runs at the start of each Embed.
	embedHook func(ctx context.Context, seqs [][]int32)
	closed    chan struct{} // closed by Close when non-nil
}

func (f *fakeEngine) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	if f.embedHook != nil {
		f.embedHook(ctx, seqs)
	}
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		for _, t := range s {
			switch {
			case t >= fakeVocab:
				return nil, &InputError{Index: i, Reason: fmt.Sprintf("token id %d is outside the vocabulary [0, %d)", t, fakeVocab)}
			case t == tokFail:
				return nil, errors.New("fake decode failed")
			case f.child && t == tokCrash:
				f.crash()
			case f.child && t == tokHang:
				select {} // a wedged engine that ignores its context
			}
		}
		out[i] = fakeVector(s)
	}
	return out, nil
}

// crash aborts the process as a GGML_ASSERT would, once per FAKE_CRASH_ONCE_FILE.
func (f *fakeEngine) crash() {
	if f.crashOnce != "" {
		if fileExists(f.crashOnce) {
			return
		}
		if err := os.WriteFile(f.crashOnce, []byte("crashed\n"), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "fake worker:", err)
		}
	}
	fmt.Fprintln(os.Stderr, "GGML_ASSERT(fake) failed: the fake engine aborts")
	os.Exit(134)
}

func (f *fakeEngine) Close() error {
	if f.closed != nil {
		close(f.closed)
	}
	return nil
}

func fakeWorkerMain(args []string) int {
	if len(args) > 0 && args[0] == "worker" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	socket := fs.String("socket", "", "")
	model := fs.String("model", "", "")
	nCtx := fs.Int("ctx", fakeDefaultCtx, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if dir := testenv.Get("FAKE_RECORD_DIR"); dir != "" {
		name := filepath.Join(dir, strconv.Itoa(os.Getpid())+".args")
		if err := os.WriteFile(name, []byte(strings.Join(os.Args[1:], "\n")), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "fake worker:", err)
			return 1
		}
	}
	if msg := testenv.Get("FAKE_CRASH_AT_START"); msg != "" {
		if cond := testenv.Get("FAKE_CRASH_AT_START_IF"); cond == "" || fileExists(cond) {
			fmt.Fprintln(os.Stderr, msg)
			return 3
		}
	}
	cfg := WorkerConfig{
		SocketPath:      *socket,
		ShutdownTimeout: 500 * time.Millisecond,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	crashOnce := testenv.Get("FAKE_CRASH_ONCE_FILE")
	load := func() (Engine, EngineInfo, error) {
		if msg := testenv.Get("FAKE_LOAD_FAIL"); msg != "" {
			return nil, EngineInfo{}, errors.New(msg)
		}
		if testenv.Get("FAKE_NEVER_READY") == "1" {
			select {}
		}
		delay, _ := time.ParseDuration(testenv.Get("FAKE_LOAD_DELAY"))
		if d, _ := time.ParseDuration(testenv.Get("FAKE_SLOW_RESTART")); d > 0 && crashOnce != "" {
			if fileExists(crashOnce) {
				delay = d
			}
		}
		// A fake's load is not a control loop: sleeping is what a real load looks like.
		for end := time.Now().Add(delay); time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
			if testenv.Get("FAKE_LOAD_PROGRESS") == "1" {
				fmt.Fprintln(os.Stderr, "load_tensors: loading ...")
			}
		}
		return &fakeEngine{child: true, crashOnce: crashOnce},
			EngineInfo{NEmbd: fakeNEmbd, MaxTokens: *nCtx, MaxBatchTokens: *nCtx, Model: filepath.Base(*model)}, nil
	}
	if testenv.Get("FAKE_WEDGE_ON_EXIT") == "1" {
		// A wedged worker survives SIGTERM after RunWorker returns. Ignoring the
		// signal only once RunWorker has returned leaves a window in which
		// the default action still ends the process (stop closes stdin and
		// signals at once); a channel that stays registered, and is never read,
		// keeps the signal caught for the whole life of the process while
		// RunWorker still receives it on its own channel.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT)
	}
	err := RunWorker(context.Background(), cfg, load)
	if testenv.Get("FAKE_WEDGE_ON_EXIT") == "1" {
		select {}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// fakeSpec starts the fake worker with extra environment switches.
func fakeSpec(t *testing.T, env ...string) WorkerSpec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return WorkerSpec{
		Path: exe,
		Args: []string{"worker", "--model", "/models/" + fakeModel},
		// Under -race a process sleeps 1s at exit by default, which would slow
		// every stop the tests time.
		Env: append([]string{envFakeWorker + "=1", "GORACE=atexit_sleep_ms=0"}, env...),
	}
}

// processGone reports whether no process (not even a zombie) has this pid.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// eventually polls cond (tests only) until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// recordedArgs reads the command lines the fake workers wrote to dir, by pid.
func recordedArgs(t *testing.T, dir string) map[int][]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int][]string)
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".args"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[pid] = strings.Split(string(b), "\n")
	}
	return out
}

// quietLogger discards log output that would clutter test results.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestFakeVectorIsExactInFloat32(t *testing.T) {
	// The tests compare vectors with ==, which is only sound if fakeVector's values
	// survive float32 and JSON exactly; 2^20/4 bounds them well inside 2^24.
	seq := make([]int32, 40000)
	for i := range seq {
		seq[i] = fakeVocab - 1
	}
	for j, x := range fakeVector(seq) {
		if x != float32(float64(x)) || x > 1<<20 || x < 0 {
			t.Errorf("component %d = %v is not a small exact value", j, x)
		}
	}
	if a, b := fakeVector([]int32{1, 2}), fakeVector([]int32{2, 1}); a[1] == b[1] {
		t.Errorf("fakeVector ignores order: %v %v", a, b)
	}
}

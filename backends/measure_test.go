package backends

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// TestMeasureSpawn prints how long an ephemeral worker of the real binary takes
// from spawn to ready, to the vector of an input of each length in
// EMBED_STACK_MEASURE_SPAWN (comma-separated token counts), and to its exit, with
// its peak RSS. It runs only when that variable is set; EMBED_STACK_BIN (default
// bin/embed-stack) and EMBED_STACK_MODEL (default models/tiny.gguf), relative to
// the repository root, pick the binary and model:
//
//	EMBED_STACK_MEASURE_SPAWN=8193 go test ./backends -run TestMeasureSpawn -v
func TestMeasureSpawn(t *testing.T) {
	spec := testenv.Get("EMBED_STACK_MEASURE_SPAWN")
	if spec == "" {
		t.Skip("set EMBED_STACK_MEASURE_SPAWN to measure (see the doc comment)")
	}
	root := testrepo.RootOf(t)
	abs := func(env, def string) string {
		p := testenv.Get(env)
		if p == "" {
			p = def
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		return p
	}
	bin, model := abs("EMBED_STACK_BIN", "bin/embed-stack"), abs("EMBED_STACK_MODEL", "models/tiny.gguf")
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("EMBED_STACK_MEASURE_SPAWN: %q is not a token count", f)
		}
		seq := seqOf(n)
		seq[n-1] = 151643
		nCtx := EphemeralContextSize(n)
		dir := shortTempDir(t)
		started := time.Now()
		p, err := startProc(context.Background(), WorkerSpec{Path: bin, Args: []string{"worker", "--model", model, "--log-level", "warn"}},
			filepath.Join(dir, "w.sock"), []string{"--ctx", strconv.Itoa(nCtx)}, DefaultStopTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.waitReady(context.Background(), time.Minute); err != nil {
			p.kill()
			t.Fatal(err)
		}
		ready := time.Since(started)
		if _, err := p.client.Embed(context.Background(), [][]int32{seq}); err != nil {
			p.kill()
			t.Fatal(err)
		}
		result := time.Since(started)
		rss := peakRSSOf(p.pid)
		if err := p.stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s, %d tokens (--ctx %d): ready after %s, vector after %s, exited after %s; peak RSS %d MiB",
			filepath.Base(model), n, nCtx, ready.Round(time.Millisecond), result.Round(time.Millisecond),
			time.Since(started).Round(time.Millisecond), rss>>10)
	}
}

// peakRSSOf is VmHWM of pid in KiB, 0 where /proc is absent.
func peakRSSOf(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

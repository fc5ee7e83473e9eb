package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// `embed-stack pull REF` downloads the reference's file into the Hugging Face cache
// (here from a fake Hub) with progress, prints its path, and leaves it where serve
// finds it offline; a second pull downloads nothing; a bad reference fails with the
// Hub's reason (issue 27).
func TestPullCommand(t *testing.T) {
	bin, model := e2e.Paths(t)
	h, commit, tiny := fakeOfficialHub(t, model)
	cache := t.TempDir()
	pull := func(env []string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"pull"}, args...)...)
		cmd.Env = env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return o.String(), e.String(), e2e.ExitCode(err)
	}

	out, errOut, code := pull(hubEnv(h.URL, cache), officialRepo)
	want := filepath.Join(cache, "models--Qwen--Qwen3-Embedding-0.6B-GGUF", "snapshots", commit, officialFile)
	if code != 0 || out != want+"\n" {
		t.Fatalf("pull: exit %d, stdout %q, want %s\nstderr:\n%s", code, out, want, errOut)
	}
	got, err := os.ReadFile(want)
	if err != nil || !bytes.Equal(got, tiny) {
		t.Fatalf("the cached file: %v, %d bytes; want the Hub's %d", err, len(got), len(tiny))
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(tiny))
	if !strings.Contains(errOut, "downloading model") || !strings.Contains(errOut, "sha256 "+sum) {
		t.Errorf("stderr shows no progress or no sha256 %s:\n%s", sum, errOut)
	}

	// Cached: offline, the same file, nothing downloaded.
	out, errOut, code = pull(append(hubEnv(h.URL, cache), "HF_HUB_OFFLINE=1"), officialRepo)
	if code != 0 || out != want+"\n" || strings.Contains(errOut, "downloading model") {
		t.Errorf("second pull, offline: exit %d, stdout %q\nstderr:\n%s", code, out, errOut)
	}

	if _, errOut, code = pull(hubEnv(h.URL, cache), "nobody/missing-GGUF"); code != 1 || !strings.Contains(errOut, "embed-stack pull: ") || !strings.Contains(errOut, "nobody/missing-GGUF") {
		t.Errorf("a missing repository: exit %d\n%s", code, errOut)
	}
	if _, errOut, code = pull(hubEnv(h.URL, cache)); code != 2 || !strings.Contains(errOut, "embed-stack pull Qwen/Qwen3-Embedding-0.6B-GGUF") {
		t.Errorf("no reference: exit %d\n%s", code, errOut)
	}
}

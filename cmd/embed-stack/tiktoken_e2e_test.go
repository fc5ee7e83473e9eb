package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// `embed-stack tiktoken-cache DIR` writes the file LangChain's tiktoken needs offline
// and prints the line that points tiktoken at it; without a folder it says how to
// call it (issue 27). make test-python runs LangChain with the folder it writes.
func TestTiktokenCacheCommand(t *testing.T) {
	bin, _ := e2e.Paths(t)
	dir := filepath.Join(t.TempDir(), "tiktoken")
	cmd := exec.Command(bin, "tiktoken-cache", dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tiktoken-cache: %v\n%s", err, stderr.String())
	}
	path := filepath.Join(dir, tokenizer.Cl100kTiktokenCacheKey)
	if string(out) != "export TIKTOKEN_CACHE_DIR="+dir+"\n" || !strings.Contains(stderr.String(), path) {
		t.Errorf("stdout %q, stderr %q: want the export line and the file's path", out, stderr.String())
	}
	b, err := os.ReadFile(path)
	sum := sha256.Sum256(b)
	if err != nil || hex.EncodeToString(sum[:]) != tokenizer.Cl100kTiktokenSHA256 {
		t.Errorf("%s: %v, sha256 %x; want tiktoken's %s", path, err, sum, tokenizer.Cl100kTiktokenSHA256)
	}

	bad := exec.Command(bin, "tiktoken-cache")
	msg, err := bad.CombinedOutput()
	if e2e.ExitCode(err) != 2 || !strings.Contains(string(msg), "embed-stack tiktoken-cache DIR") {
		t.Errorf("without a folder: exit %d, %q; want 2 and the usage", e2e.ExitCode(err), msg)
	}
}

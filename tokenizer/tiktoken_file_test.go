package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteCl100kTiktoken: the file is the one tiktoken downloads (the SHA-256 it
// checks), one line per ordinary token in rank order.
func TestWriteCl100kTiktoken(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCl100kTiktoken(&b); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b.Bytes())
	if got := hex.EncodeToString(sum[:]); got != Cl100kTiktokenSHA256 {
		t.Errorf("sha256 %s, want %s (tiktoken would reject the file)", got, Cl100kTiktokenSHA256)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != cl100kOrdinary {
		t.Fatalf("%d lines, want %d", len(lines), cl100kOrdinary)
	}
	// "!" is rank 0 and "hello" rank 15339 (TestCl100kKnownIDs).
	for _, want := range []struct {
		i    int
		line string
	}{{0, "IQ== 0"}, {15339, "aGVsbG8= 15339"}} {
		if lines[want.i] != want.line {
			t.Errorf("line %d = %q, want %q", want.i, lines[want.i], want.line)
		}
	}
	if !strings.HasSuffix(lines[100255], " 100255") {
		t.Errorf("last line %q does not end with rank 100255", lines[100255])
	}
}

// WriteCl100kTiktokenCache writes the file tiktoken looks for, keeps a good one and
// replaces a damaged one.
func TestWriteCl100kTiktokenCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "tiktoken")
	path, err := WriteCl100kTiktokenCache(dir)
	if err != nil || path != filepath.Join(dir, Cl100kTiktokenCacheKey) {
		t.Fatalf("WriteCl100kTiktokenCache = %q, %v", path, err)
	}
	check := func(what string) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil || hexSHA256(b) != Cl100kTiktokenSHA256 {
			t.Fatalf("%s: %d bytes with sha256 %s (%v), want %s", what, len(b), hexSHA256(b), err, Cl100kTiktokenSHA256)
		}
	}
	check("written")
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteCl100kTiktokenCache(dir); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(old) {
		t.Error("a good file was written again")
	}
	if err := os.WriteFile(path, []byte("truncated"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteCl100kTiktokenCache(dir); err != nil {
		t.Fatal(err)
	}
	check("a damaged file replaced")
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the folder holds %d files, want the one (no temporary left)", len(entries))
	}
}

package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
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

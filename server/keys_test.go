package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestLoadAPIKeys(t *testing.T) {
	dir := t.TempDir()
	n := 0
	file := func(content string) string {
		n++
		path := filepath.Join(dir, "keys-"+strconv.Itoa(n))
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name    string
		flags   []string
		content *string // nil: no --api-key-file
		want    []string
		err     string
	}{
		{name: "none", want: nil},
		{name: "flags only", flags: []string{"a", "b"}, want: []string{"a", "b"}},
		{name: "file with comments and blanks", flags: []string{"a"}, content: keyText("# team keys\n\n  sk-one  \r\n#sk-old\nsk-two\n"), want: []string{"a", "sk-one", "sk-two"}},
		{name: "file without keys", content: keyText("# none yet\n\n"), err: "holds no key"},
		{name: "key with inner NUL", content: keyText("sk\x00x\n"), err: "line 1: the key holds a line break or NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.content != nil {
				path = file(*tt.content)
			}
			got, err := LoadAPIKeys(tt.flags, path, quiet)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := LoadAPIKeys(nil, filepath.Join(dir, "absent"), quiet); err == nil || !strings.Contains(err.Error(), "--api-key-file") {
		t.Errorf("absent file: %v, want an error naming --api-key-file", err)
	}
}

func keyText(s string) *string { return &s }

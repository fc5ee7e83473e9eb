package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
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
			got, err := loadAPIKeys(tt.flags, path, quiet)
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
	if _, err := loadAPIKeys(nil, filepath.Join(dir, "absent"), quiet); err == nil || !strings.Contains(err.Error(), "--api-key-file") {
		t.Errorf("absent file: %v, want an error naming --api-key-file", err)
	}
}

func keyText(s string) *string { return &s }

func TestCheckGuardFlags(t *testing.T) {
	good := serveFlags{maxConcurrent: 64, requestTimeout: 10 * time.Minute, maxHeaderBytes: 64 << 10, workerHangTimeout: 5 * time.Minute,
		bodyTimeout: 30 * time.Second, writeStall: 30 * time.Second, headerTimeout: 10 * time.Second, maxConnections: 1024}
	tests := []struct {
		name string
		edit func(*serveFlags)
		err  string
	}{
		{"defaults", func(*serveFlags) {}, ""},
		{"hang detection off", func(f *serveFlags) { f.workerHangTimeout = 0 }, ""},
		{"no concurrency", func(f *serveFlags) { f.maxConcurrent = 0 }, "--max-concurrent-requests must be at least 1; got 0"},
		{"zero timeout", func(f *serveFlags) { f.requestTimeout = 0 }, "--request-timeout must be positive; got 0s"},
		{"tiny header limit", func(f *serveFlags) { f.maxHeaderBytes = 100 }, "--max-header-bytes must be at least 1024; got 100"},
		{"no body timeout", func(f *serveFlags) { f.bodyTimeout = 0 }, "--body-timeout, --write-stall-timeout and --header-timeout must be positive"},
		{"no connections", func(f *serveFlags) { f.maxConnections = 0 }, "--max-connections must be at least 1; got 0"},
		{"negative hang timeout", func(f *serveFlags) { f.workerHangTimeout = -time.Second }, "--worker-hang-timeout must not be negative"},
		{"empty key", func(f *serveFlags) { f.apiKeys = stringList{"ok", ""} }, "--api-key #2: the key is empty"},
		{"key with spaces around", func(f *serveFlags) { f.apiKeys = stringList{" sk"} }, "--api-key #1: the key starts or ends with white space"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := good
			tt.edit(&f)
			err := checkGuardFlags(&f)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("err %v, want %q", err, tt.err)
			}
		})
	}
}

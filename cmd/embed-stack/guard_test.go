package main

import (
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/flagconfig"
)

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
		{"empty key", func(f *serveFlags) { f.apiKeys = flagconfig.StringList{"ok", ""} }, "--api-key #2: the key is empty"},
		{"key with spaces around", func(f *serveFlags) { f.apiKeys = flagconfig.StringList{" sk"} }, "--api-key #1: the key starts or ends with white space"},
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

package tail

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"short", []string{"a\n", "b\n"}, "a\nb\n"},
		{"exactly max", []string{"0123456789"}, "0123456789"},
		{"cut at a line boundary", []string{"line one\n", "two\n", "three\n"}, "...\nthree\n"},
		{"cut without a newline keeps the last bytes", []string{"abcdefghijklmnop"}, "...\nghijklmnop"},
		{"many writes trimmed", []string{strings.Repeat("x", 25), "\nend"}, "...\nend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var also bytes.Buffer
			tb := New(10, &also)
			total := 0
			for _, w := range tt.writes {
				n, err := tb.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				total += len(w)
			}
			if got := tb.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if tb.Written() != int64(total) {
				t.Errorf("Written() = %d, want %d", tb.Written(), total)
			}
			if also.String() != strings.Join(tt.writes, "") {
				t.Errorf("the copy got %q", also.String())
			}
		})
	}
}

// failingWriter stands for a copy whose reader has gone.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestBufferIgnoresCopyErrors(t *testing.T) {
	tb := New(10, failingWriter{})
	if n, err := tb.Write([]byte("abc")); n != 3 || err != nil {
		t.Fatalf("Write = %d, %v; a failing copy must not fail the child's output", n, err)
	}
}

// TestBufferConcurrentWriters: two copiers (stdout and stderr) and a reader at once
// lose no byte from the count and never return more than max bytes of tail.
func TestBufferConcurrentWriters(t *testing.T) {
	tb := New(64, nil)
	var wg sync.WaitGroup
	for _, line := range []string{"out\n", "err\n"} {
		wg.Go(func() {
			for range 1000 {
				tb.Write([]byte(line))
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			if s := tb.String(); len(s) > len("...\n")+64 {
				t.Errorf("String() holds %d bytes, want at most %d", len(s), len("...\n")+64)
				return
			}
		}
	})
	wg.Wait()
	if got := tb.Written(); got != 8000 {
		t.Errorf("Written() = %d, want 8000", got)
	}
}

// Package tail keeps the last bytes a child process wrote, so that an error about the
// child can quote what it said last (a llama.cpp assertion, a refused flag) without
// holding all of a long log. The worker supervisor (backends), the benchmark's peers
// and every test harness that starts a process use this one buffer.
//
// It refuses to know anything of processes: it is an io.Writer.
package tail

import (
	"bytes"
	"io"
	"sync"
)

// Buffer keeps the last max bytes written to it and counts all of them. It is safe
// for concurrent use: a process's stdout and stderr copiers and its reader all touch
// it.
type Buffer struct {
	max  int
	also io.Writer // optional copy; its errors are ignored

	mu      sync.Mutex // guards buf and written
	buf     []byte     // holds up to 2*max bytes, so trimming is amortised
	written int64
}

// New returns a Buffer that keeps the last max bytes, and copies every write to also
// when it is not nil.
func New(max int, also io.Writer) *Buffer {
	return &Buffer{max: max, also: also}
}

func (t *Buffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	t.written += int64(len(b))
	t.buf = append(t.buf, b...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	t.mu.Unlock()
	if t.also != nil {
		// An error must not reach exec's copier: it would stop reading and the
		// child would block (or die of SIGPIPE) writing its log.
		_, _ = t.also.Write(b)
	}
	return len(b), nil
}

// Written returns how many bytes have been written in all: a count that moves is a
// child making progress.
func (t *Buffer) Written() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.written
}

// String returns the last max bytes; a tail that was cut starts at a line
// boundary, after "...".
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) <= t.max && int64(len(b)) == t.written {
		return string(b)
	}
	b = b[max(0, len(b)-t.max):]
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i+1 < len(b) {
		b = b[i+1:]
	}
	return "...\n" + string(b)
}

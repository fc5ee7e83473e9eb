//go:build linux

package llama

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// threadNice reads the nice value of thread tid of this process from /proc.
func threadNice(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): state is field 3,
	// nice field 19.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	n, err := strconv.Atoi(f[19-3])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNice: the thread that runs llama_decode (and from which ggml starts its
// decoding threads, which inherit its priority) runs at Config.Nice, and other
// threads of the process are left alone.
func TestNice(t *testing.T) {
	base := threadNice(t, syscall.Gettid())
	for _, nice := range []int{0, 7} {
		t.Run(fmt.Sprint(nice), func(t *testing.T) {
			e := openTiny(t, Config{ContextTokens: 64, MaxSeqs: 1, Nice: nice})
			decodeNice := -100
			e.beforeDecode = func() { decodeNice = threadNice(t, syscall.Gettid()) }
			embedOne(t, e, randomSeq(3, 5, e.Info().NVocab))
			want := base
			if nice > 0 {
				want = nice
			}
			if decodeNice != want {
				t.Errorf("decoding thread nice %d, want %d", decodeNice, want)
			}
			if got := threadNice(t, syscall.Gettid()); got != base {
				t.Errorf("test goroutine's thread nice %d, want %d (untouched)", got, base)
			}
		})
	}
	if _, err := Open(Config{ModelPath: modelFile(t, tinyModel), Nice: 20}); err == nil || !strings.Contains(err.Error(), "Config.Nice is 20; it must be 0 to 19") {
		t.Errorf("Nice 20: err = %v", err)
	}
}

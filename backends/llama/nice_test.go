//go:build linux

package llama

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// threadNices reads the nice value of every thread of this process, by id.
func threadNices(t *testing.T) map[int]int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
		if err != nil {
			continue // it ended
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if v, err := strconv.Atoi(f[19-3]); err == nil {
			out[tid] = v
		}
	}
	return out
}

// TestNice: the thread that runs llama_decode (and from which ggml starts its
// decoding threads, which inherit its priority) runs at Config.Nice, and so do the
// threads that live with the context (the kernels' pool, ggml's threadpool: a
// 3-thread engine has at least 2 besides the decoding thread), which inherit the
// priority of the thread that creates the context; other threads of the process
// are left alone.
func TestNice(t *testing.T) {
	base := threadNice(t, syscall.Gettid())
	for _, nice := range []int{0, 7} {
		t.Run(fmt.Sprint(nice), func(t *testing.T) {
			e := openTiny(t, Config{ContextTokens: 64, MaxSeqs: 1, Nice: nice, Threads: 3})
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
	// An encoder's context starts with threads of its own (ggml's threadpool,
	// es_threadpool_attach, and the kernels' pool): every thread the engine
	// starts runs at its priority. Idle OS threads for the Go scheduler first, so
	// that it starts none of its own meanwhile.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			time.Sleep(20 * time.Millisecond)
			runtime.UnlockOSThread()
		}()
	}
	wg.Wait()
	before := threadNices(t)
	e, err := Open(Config{ModelPath: modelFile(t, bertTinyModel), ContextTokens: 64, MaxSeqs: 1, Nice: 7, Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	embedOne(t, e, randomSeq(3, 5, e.Info().NVocab))
	started := map[int]int{}
	for tid, n := range threadNices(t) {
		if _, ok := before[tid]; !ok {
			started[tid] = n
		}
	}
	e.Close()
	low := 0
	for _, n := range started {
		if n == 7 {
			low++
		}
	}
	if low != len(started) || low < 3 {
		t.Errorf("threads started by an encoder's 3-thread engine at nice 7: %v (thread: nice); want every one at 7, at least the decoding thread and 2 of a pool", started)
	}
	if _, err := Open(Config{ModelPath: modelFile(t, tinyModel), Nice: 20}); err == nil || !strings.Contains(err.Error(), "Config.Nice is 20; it must be 0 to 19") {
		t.Errorf("Nice 20: err = %v", err)
	}
}

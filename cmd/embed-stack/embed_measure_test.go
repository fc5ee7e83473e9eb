package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// TestEmbedMeasure embeds a large generated file and reports items/s and the peak
// resident memory of the whole process tree (the embed process plus its workers,
// sampled from /proc every 100ms and summed). It is a measurement, not a check of the
// suite: it runs only with EMBED_STACK_MEASURE=N (the number of lines, e.g. 100000),
// and EMBED_STACK_MEASURE_MODEL may name another GGUF. docs/scaling.md quotes it.
func TestEmbedMeasure(t *testing.T) {
	n, _ := strconv.Atoi(testenv.Get("EMBED_STACK_MEASURE"))
	if n <= 0 {
		t.Skip("set EMBED_STACK_MEASURE=100000 to measure")
	}
	bin, model := e2e.Paths(t)
	if m := testenv.Get("EMBED_STACK_MEASURE_MODEL"); m != "" {
		model = m
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	writeLines(t, in, corpusLines(t, n))
	fi, _ := os.Stat(in)
	out := filepath.Join(dir, "out.npy")
	args := append([]string{"embed", "--model", model, "--input", in, "--output", out}, strings.Fields(testenv.Get("EMBED_STACK_MEASURE_ARGS"))...)
	cmd := exec.Command(bin, args...)
	var log bytes.Buffer
	cmd.Stderr = &log
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak, peakMain int64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case err = <-done:
			break loop
		case <-tick.C:
			total, main := treeRSS(cmd.Process.Pid)
			peak, peakMain = max(peak, total), max(peakMain, main)
		}
	}
	el := time.Since(start)
	if err != nil {
		t.Fatalf("embed: %v\n%s", err, log.String())
	}
	rows := readNPYRows(t, out)
	if rows != n {
		t.Fatalf("%d rows, want %d", rows, n)
	}
	summary := ""
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "embedding done") {
			summary = l
		}
	}
	t.Logf("%d lines (%.1f MB) with %s in %s: %.1f items/s overall (start-up included); peak RSS: %.1f MiB all processes, %.1f MiB the embed process\n%s",
		n, float64(fi.Size())/1e6, filepath.Base(model), el.Round(time.Millisecond), float64(n)/el.Seconds(),
		float64(peak)/(1<<20), float64(peakMain)/(1<<20), summary)
}

func readNPYRows(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := make([]byte, 128)
	if _, err := f.Read(h); err != nil {
		t.Fatal(err)
	}
	s := string(h)
	var rows, dim int
	fmt.Sscanf(s[strings.Index(s, "'shape': (")+len("'shape': ("):], "%d, %d)", &rows, &dim)
	return rows
}

// treeRSS sums VmRSS over pid and its descendants (Linux /proc); main is pid's own.
func treeRSS(pid int) (total, main int64) {
	children := procChildren()
	stack := []int{pid}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		stack = append(stack, children[p]...)
		rss := vmRSS(p)
		total += rss
		if p == pid {
			main = rss
		}
	}
	return total, main
}

// procChildren maps each process id to its children's (Linux /proc).
func procChildren() map[int][]int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	return children
}

func vmRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNoProc is returned where /proc is missing (every OS but Linux): memory
// figures are then absent from the report, nothing else is.
var ErrNoProc = errors.New("bench: no /proc on this system; process memory is not measured")

// Proc is one process of a tree.
type Proc struct {
	PID  int `json:"pid"`
	PPID int `json:"ppid"`
	// Cmd is the command line, its first words only.
	Cmd string `json:"cmd"`
	// RSS is the resident set size in bytes; HWM its peak so far (VmHWM).
	RSS int64 `json:"rss_bytes"`
	HWM int64 `json:"hwm_bytes"`
	// Anon is the private part of RSS (RssAnon: heap, stacks); the rest is pages
	// of files, mostly the executable's, which the kernel shares with every process
	// that maps the same file and may map in 2 MiB pages where it caches the file
	// in large folios.
	Anon int64 `json:"rss_anon_bytes,omitempty"`
	// PSS is the proportional set size (pages shared with other processes, such
	// as the model file several workers map, divided among them); 0 where not read.
	PSS int64 `json:"pss_bytes,omitempty"`
}

// TreeSnapshot lists the processes of a tree at one moment, root first.
type TreeSnapshot struct {
	Procs []Proc `json:"procs"`
	// RSS is the sum over Procs. Pages of the model file that several processes map
	// count once per process, as RSS does.
	RSS int64 `json:"rss_bytes"`
	// PSS is the sum of Procs' PSS, once ReadPSS has run: what the tree costs the
	// machine, shared pages counted once.
	PSS int64 `json:"pss_bytes,omitempty"`
}

// ReadPSS fills in the PSS of every process from /proc/PID/smaps_rollup. The kernel
// walks each process's page tables for it (milliseconds for a model-sized process),
// so samplers read it only for the snapshots they keep.
func (s *TreeSnapshot) ReadPSS() {
	s.PSS = 0
	for i := range s.Procs {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.Procs[i].PID), "smaps_rollup"))
		if err != nil {
			continue // exited, or a kernel without smaps_rollup
		}
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, "Pss:") {
				s.Procs[i].PSS = kB(line)
				s.PSS += s.Procs[i].PSS
				break
			}
		}
	}
}

// Snapshot reads the process tree under root (root included) from /proc.
func Snapshot(root int) (TreeSnapshot, error) {
	pids, parents, err := treePIDs(root)
	if err != nil {
		return TreeSnapshot{}, err
	}
	var snap TreeSnapshot
	for _, pid := range pids {
		p, err := readProc(pid)
		if err != nil {
			if pid == root {
				return TreeSnapshot{}, err
			}
			continue // exited between the scan and now
		}
		p.PPID = parents[pid]
		snap.Procs = append(snap.Procs, p)
		snap.RSS += p.RSS
	}
	return snap, nil
}

// treePIDs lists root and its descendants, breadth first, and every process's parent.
func treePIDs(root int) ([]int, map[int]int, error) {
	if runtime.GOOS != "linux" {
		return nil, nil, ErrNoProc
	}
	parents, err := readParents()
	if err != nil {
		return nil, nil, err
	}
	children := map[int][]int{}
	for pid, ppid := range parents {
		children[ppid] = append(children[ppid], pid)
	}
	var pids []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		pids = append(pids, pid)
		kids := children[pid]
		slices.Sort(kids)
		queue = append(queue, kids...)
	}
	return pids, parents, nil
}

// userHZ is the unit of the CPU times in /proc/*/stat: USER_HZ, 100 on every Linux
// architecture's user-space ABI whatever the kernel's own tick.
const userHZ = 100

// TreeCPU is the CPU time the tree under root has used so far: user and system time
// of every live process in it, plus that of the children each has waited for (so an
// ephemeral worker's time stays counted after it exits). On a shared machine it
// moves far less with the neighbours' load than wall time does, though ggml's
// threads spinning at a barrier for a descheduled partner still count.
func TreeCPU(root int) (time.Duration, error) {
	pids, _, err := treePIDs(root)
	if err != nil {
		return 0, err
	}
	return cpuOf(root, pids)
}

// ProcCPU is TreeCPU of one process alone (its threads included), without the scan
// of /proc that finding a tree takes: what the in-process floor is measured with.
func ProcCPU(pid int) (time.Duration, error) {
	if runtime.GOOS != "linux" {
		return 0, ErrNoProc
	}
	return cpuOf(pid, []int{pid})
}

func cpuOf(root int, pids []int) (time.Duration, error) {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			if pid == root {
				return 0, fmt.Errorf("bench: process %d: %w", pid, err)
			}
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		// Fields 14 to 17 of stat (utime, stime, cutime, cstime); f[0] is field 3.
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 15 {
			continue
		}
		for _, s := range f[11:15] {
			n, _ := strconv.ParseInt(s, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// readParents maps every process's pid to its parent's, from /proc/*/stat.
func readParents() (map[int]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoProc, err)
	}
	parents := make(map[int]int, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so cut
		// after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			parents[pid] = ppid
		}
	}
	return parents, nil
}

// readProc reads one process's memory figures and command line.
func readProc(pid int) (Proc, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	f, err := os.Open(filepath.Join(dir, "status"))
	if err != nil {
		return Proc{}, fmt.Errorf("bench: process %d: %w", pid, err)
	}
	defer f.Close()
	p := Proc{PID: pid}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			p.RSS = kB(line)
		case strings.HasPrefix(line, "VmHWM:"):
			p.HWM = kB(line)
		case strings.HasPrefix(line, "RssAnon:"):
			p.Anon = kB(line)
		}
	}
	if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		words := strings.Fields(strings.ReplaceAll(string(cmd), "\x00", " "))
		if len(words) > 0 {
			words[0] = filepath.Base(words[0])
		}
		p.Cmd = clip(strings.Join(words[:min(len(words), 4)], " "), 80)
	}
	return p, nil
}

// kB reads "Key:   1234 kB" as bytes.
func kB(line string) int64 {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n << 10
}

// Tree samples a process tree's memory until Stop: the peak of the tree's summed
// RSS, and each process's own peak. A process that lives between two samples (a
// short-lived worker) is caught only if a sample falls in its life; the interval
// bounds what can be missed. Safe for concurrent use.
type Tree struct {
	root int
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex // guards the fields below
	peak    TreeSnapshot
	byPID   map[int]Proc // each process's last sample, HWM kept at its highest
	samples int
	err     error
}

// WatchTree starts sampling the tree under root every interval.
func WatchTree(root int, interval time.Duration) *Tree {
	t := &Tree{root: root, stop: make(chan struct{}), done: make(chan struct{}), byPID: map[int]Proc{}}
	go t.loop(interval)
	return t
}

func (t *Tree) loop(interval time.Duration) {
	defer close(t.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		t.sample()
		select {
		case <-t.stop:
			t.sample()
			return
		case <-tick.C:
		}
	}
}

func (t *Tree) sample() {
	s, err := Snapshot(t.root)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if t.err == nil && t.samples == 0 {
			t.err = err
		}
		return
	}
	t.samples++
	if s.RSS > t.peak.RSS {
		s.ReadPSS()
		t.peak = s
	}
	for _, p := range s.Procs {
		old, ok := t.byPID[p.PID]
		if ok {
			p.HWM = max(p.HWM, old.HWM)
		}
		t.byPID[p.PID] = p
	}
}

// TreeStats is what a Tree saw.
type TreeStats struct {
	// Peak is the sample with the highest summed RSS.
	Peak TreeSnapshot `json:"peak"`
	// Procs is every process seen, by pid, with its own peak (HWM).
	Procs []Proc `json:"procs"`
	// Samples taken.
	Samples int `json:"samples"`
}

// Stop ends sampling and returns what was seen, or the error of the first sample
// when none succeeded.
func (t *Tree) Stop() (TreeStats, error) {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.samples == 0 {
		return TreeStats{}, t.err
	}
	st := TreeStats{Peak: t.peak, Samples: t.samples}
	for _, p := range t.byPID {
		st.Procs = append(st.Procs, p)
	}
	slices.SortFunc(st.Procs, func(a, b Proc) int { return a.PID - b.PID })
	return st, nil
}

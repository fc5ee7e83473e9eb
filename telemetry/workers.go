package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Workers is what the worker gauges read at each collection. Every field is
// optional; a nil function leaves its gauge out.
type Workers struct {
	// Restarts counts attempts to replace a dead warm worker
	// (backends.Warm.Restarts).
	Restarts func() int
	// HangKills counts warm workers killed for answering nothing for
	// --worker-hang-timeout (backends.HangWatch.Kills).
	HangKills func() int
	// WarmPID is the ready warm worker's process id, 0 while there is none
	// (backends.Warm.PID). Every other child process counts as an ephemeral worker.
	WarmPID func() int
	// WarmPIDs, when set, are the ready warm workers' process ids of a server with
	// several models (0 for a model that has none); WarmPID is then unused.
	WarmPIDs func() []int
	// Ready reports whether the warm worker takes requests (backends.Warm.Ready).
	Ready func() bool
	// Parent is the process whose children are the workers; 0 means this process.
	Parent int
	// Ephemeral reports the admission of long inputs: ephemeral workers running,
	// the tokens of their inputs (what the memory budget counts), and the inputs
	// queued for a slot (routing.Router.EphemeralState).
	Ephemeral func() (running, tokens, queued int)
	// Device reads the memory of the warm worker's device now (backends.Warm.Device):
	// ok is false while there is no ready worker or it reports no device.
	Device func(ctx context.Context) (d DeviceMemory, ok bool)
}

// DeviceMemory is a device's memory, labelled by the device and its backend.
type DeviceMemory struct {
	Name, Backend string // "CUDA0", "CUDA"; "CPU", "CPU"
	Used, Total   int64  // bytes; Used counts every process's allocations
}

// Worker roles, the role label of the worker gauges.
const (
	RoleWarm      = "warm"
	RoleEphemeral = "ephemeral"
)

// workersScope is the instrumentation scope of the worker gauges.
const workersScope = "github.com/embed-stack/embed-stack/telemetry"

// ObserveWorkers registers the worker gauges, read when metrics are collected:
//
//	embed_stack_warm_restarts_total          counter, Workers.Restarts
//	embed_stack_warm_hang_kills_total        counter, Workers.HangKills
//	embed_stack_warm_ready                   1 while the warm worker takes requests
//	embed_stack_workers{role}                live worker processes (warm, ephemeral)
//	embed_stack_worker_rss_bytes{role}       their resident memory, summed per role
//	embed_stack_ephemeral_tokens             tokens held by running ephemeral workers
//	embed_stack_queue_depth{queue}           long inputs waiting for an ephemeral worker (queue="ephemeral")
//	embed_stack_device_memory_used_bytes{device,backend}   memory in use on the warm worker's device
//	embed_stack_device_memory_total_bytes{device,backend}  and all of it
//
// Device memory is what the device's backend reports: on a GPU the driver's
// figures, on the CPU the host's (MemTotal less MemAvailable), every process's
// allocations counted either way.
//
// RSS comes from /proc/<pid>/status (VmRSS) of each child of Workers.Parent, so on
// systems without /proc the last two stay empty. It does nothing when no metric
// reader is configured.
func (t *Telemetry) ObserveWorkers(w Workers) error {
	if t.mp == nil {
		return nil
	}
	m := t.mp.Meter(workersScope)
	restarts, err := m.Int64ObservableCounter("embed_stack.warm.restarts",
		metric.WithDescription("Attempts to replace a warm worker that died."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	hangKills, err := m.Int64ObservableCounter("embed_stack.warm.hang_kills",
		metric.WithDescription("Warm workers killed (and so restarted) for answering nothing for --worker-hang-timeout with requests outstanding."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	ready, err := m.Int64ObservableGauge("embed_stack.warm.ready",
		metric.WithDescription("1 while the warm worker takes requests, else 0."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	count, err := m.Int64ObservableGauge("embed_stack.workers",
		metric.WithDescription("Live worker processes by role."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	rss, err := m.Int64ObservableGauge("embed_stack.worker.rss", metric.WithUnit("By"),
		metric.WithDescription("Resident memory of the worker processes by role (VmRSS, summed)."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	ephTokens, err := m.Int64ObservableGauge("embed_stack.ephemeral.tokens",
		metric.WithDescription("Tokens of the inputs that running ephemeral workers hold (what the ephemeral memory budget counts)."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	queue, err := m.Int64ObservableGauge("embed_stack.queue.depth",
		metric.WithDescription("Work waiting for a worker, by queue (ephemeral: long inputs waiting for an ephemeral worker slot)."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	devUsed, err := m.Int64ObservableGauge("embed_stack.device.memory.used", metric.WithUnit("By"),
		metric.WithDescription("Memory in use on the warm worker's device (GPU: the driver's figure; CPU: MemTotal less MemAvailable), every process counted."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	devTotal, err := m.Int64ObservableGauge("embed_stack.device.memory.total", metric.WithUnit("By"),
		metric.WithDescription("Memory of the warm worker's device."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	ephQueue := metric.WithAttributeSet(attribute.NewSet(attribute.String("queue", RoleEphemeral)))
	parent := w.Parent
	if parent == 0 {
		parent = os.Getpid()
	}
	warmAttr := metric.WithAttributeSet(attribute.NewSet(attribute.String("role", RoleWarm)))
	ephAttr := metric.WithAttributeSet(attribute.NewSet(attribute.String("role", RoleEphemeral)))
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if w.Device != nil {
			if d, ok := w.Device(ctx); ok {
				attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("device", d.Name), attribute.String("backend", d.Backend)))
				o.ObserveInt64(devUsed, d.Used, attrs)
				o.ObserveInt64(devTotal, d.Total, attrs)
			}
		}
		if w.Restarts != nil {
			o.ObserveInt64(restarts, int64(w.Restarts()))
		}
		if w.HangKills != nil {
			o.ObserveInt64(hangKills, int64(w.HangKills()))
		}
		if w.Ready != nil {
			v := int64(0)
			if w.Ready() {
				v = 1
			}
			o.ObserveInt64(ready, v)
		}
		if w.Ephemeral != nil {
			_, tokens, queued := w.Ephemeral()
			o.ObserveInt64(ephTokens, int64(tokens))
			o.ObserveInt64(queue, int64(queued), ephQueue)
		}
		pids, err := childPIDs(parent)
		if err != nil {
			return nil // no /proc: nothing to report, and nothing an operator can fix
		}
		warm := map[int]bool{}
		switch {
		case w.WarmPIDs != nil:
			for _, pid := range w.WarmPIDs() {
				warm[pid] = pid != 0
			}
		case w.WarmPID != nil:
			warm[w.WarmPID()] = true
		}
		var n, mem [2]int64 // [warm, ephemeral]
		for _, pid := range pids {
			b, ok := rssBytes(pid)
			if !ok {
				continue // exited, or a zombie not yet reaped
			}
			i := 1
			if warm[pid] {
				i = 0
			}
			n[i]++
			mem[i] += b
		}
		o.ObserveInt64(count, n[0], warmAttr)
		o.ObserveInt64(count, n[1], ephAttr)
		o.ObserveInt64(rss, mem[0], warmAttr)
		o.ObserveInt64(rss, mem[1], ephAttr)
		return nil
	}, restarts, hangKills, ready, count, rss, ephTokens, queue, devUsed, devTotal)
	if err != nil {
		return fmt.Errorf("telemetry: registering the worker gauges: %w", err)
	}
	return nil
}

// childPIDs lists the processes whose parent is ppid, read from /proc/<pid>/stat.
func childPIDs(ppid int) ([]int, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	if len(stats) == 0 {
		return nil, os.ErrNotExist
	}
	var out []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process has exited since the glob
		}
		pid, parent, ok := parseStat(b)
		if ok && parent == ppid {
			out = append(out, pid)
		}
	}
	return out, nil
}

// parseStat reads the pid and the parent pid from a /proc/<pid>/stat line:
// "pid (comm) state ppid ...". comm may hold spaces and parentheses, so the fields
// after it are found from the last ')'.
func parseStat(b []byte) (pid, ppid int, ok bool) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return 0, 0, false
	}
	fields := bytes.Fields(b[closing+1:])
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(fields[1]))
	if err != nil {
		return 0, 0, false
	}
	return pid, ppid, true
}

// rssBytes reads VmRSS from /proc/<pid>/status. A zombie has no VmRSS line.
func rssBytes(pid int) (int64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		rest, found := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !found {
			continue
		}
		fields := bytes.Fields(rest) // "12345 kB"
		if len(fields) != 2 || string(fields[1]) != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

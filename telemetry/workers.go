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

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// Workers is what the worker gauges read at each collection. Every field is
// optional; a nil function leaves its gauge out.
//
// A server's warm workers are described either by Models, one entry per served
// model, whose series then carry a model label, or by the single-worker fields
// (Restarts, HangKills, WarmPID, Ready, Ephemeral), which make series without
// one. The command uses Models; the single-worker fields are for a process that
// serves no named model.
type Workers struct {
	// Models are the served models' warm workers (issue 17: several models per
	// server). When set, the single-worker fields below are unused.
	Models []WarmModel
	// Restarts counts attempts to replace a dead warm worker
	// (backends.Warm.Restarts).
	Restarts func() int
	// HangKills counts warm workers killed for answering nothing for
	// --worker-hang-timeout (backends.HangWatch.Kills).
	HangKills func() int
	// WarmPID is the ready warm worker's process id, 0 while there is none
	// (backends.Warm.PID). Every other child process counts as an ephemeral worker.
	WarmPID func() int
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

// WarmModel is one served model's warm worker and ephemeral admission, as the
// worker gauges read them; its series carry the label model=Name. Every function
// is optional, as in Workers.
type WarmModel struct {
	// Name is the model's served id (its id in GET /v1/models), never an alias,
	// so that the label's values are the configured models.
	Name string
	// Restarts, HangKills, PID and Ready are Workers' fields for this model's
	// warm worker (backends.OnDemand's methods of the same names; PID is 0 while
	// the worker is stopped by --keep-alive).
	Restarts  func() int
	HangKills func() int
	PID       func() int
	Ready     func() bool
	// ColdStarts counts the starts of a warm worker stopped by --keep-alive,
	// done or failed (backends.OnDemand.Loads).
	ColdStarts func() int
	// Ephemeral is Workers.Ephemeral for this model's long inputs (each model
	// admits its own).
	Ephemeral func() (running, tokens, queued int)
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
//	embed_stack_warm_restarts_total{model}       counter, Restarts
//	embed_stack_warm_hang_kills_total{model}     counter, HangKills
//	embed_stack_warm_cold_starts_total{model}    counter, WarmModel.ColdStarts
//	embed_stack_warm_ready{model}                1 while the warm worker takes requests or is stopped by --keep-alive
//	embed_stack_workers{role,model}              live worker processes (warm, ephemeral)
//	embed_stack_worker_rss_bytes{role,model}     their resident memory, summed per role
//	embed_stack_ephemeral_tokens{model}          tokens held by running ephemeral workers
//	embed_stack_queue_depth{queue,model}         long inputs waiting for an ephemeral worker (queue="ephemeral")
//	embed_stack_device_memory_used_bytes{device,backend}   memory in use on the warm worker's device
//	embed_stack_device_memory_total_bytes{device,backend}  and all of it
//
// The model label is there with Workers.Models only. The ephemeral workers'
// count and memory have none even then: they are told from the warm ones by
// their pids, and nothing says which model an ephemeral process serves (the
// running count per model is the ephemeral-workers stage, backends.ephemeral).
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
	coldStarts, err := m.Int64ObservableCounter("embed_stack.warm.cold_starts",
		metric.WithDescription("Starts of a warm worker that --keep-alive had stopped for idleness, done or failed."))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	ready, err := m.Int64ObservableGauge("embed_stack.warm.ready",
		metric.WithDescription("1 while the model's warm worker takes requests, and while --keep-alive has stopped it (the next request starts it); 0 while it starts or restarts."))
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
	labels := newWorkerLabels(w.Models)
	parent := w.Parent
	if parent == 0 {
		parent = os.Getpid()
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if w.Device != nil {
			if d, ok := w.Device(ctx); ok {
				attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("device", d.Name), attribute.String("backend", d.Backend)))
				o.ObserveInt64(devUsed, d.Used, attrs)
				o.ObserveInt64(devTotal, d.Total, attrs)
			}
		}
		warms := w.Models
		if len(warms) == 0 {
			warms = []WarmModel{{Restarts: w.Restarts, HangKills: w.HangKills, PID: w.WarmPID, Ready: w.Ready, Ephemeral: w.Ephemeral}}
		}
		for i, wm := range warms {
			l := labels[i]
			if wm.Restarts != nil {
				o.ObserveInt64(restarts, int64(wm.Restarts()), l.model)
			}
			if wm.HangKills != nil {
				o.ObserveInt64(hangKills, int64(wm.HangKills()), l.model)
			}
			if wm.ColdStarts != nil {
				o.ObserveInt64(coldStarts, int64(wm.ColdStarts()), l.model)
			}
			if wm.Ready != nil {
				v := int64(0)
				if wm.Ready() {
					v = 1
				}
				o.ObserveInt64(ready, v, l.model)
			}
			if wm.Ephemeral != nil {
				_, tokens, queued := wm.Ephemeral()
				o.ObserveInt64(ephTokens, int64(tokens), l.model)
				o.ObserveInt64(queue, int64(queued), l.queue)
			}
		}
		pids, err := childPIDs(parent)
		if err != nil {
			return nil // no /proc: nothing to report, and nothing an operator can fix
		}
		warm := map[int]int{} // pid → index in warms
		for i, wm := range warms {
			if wm.PID != nil {
				if pid := wm.PID(); pid != 0 {
					warm[pid] = i
				}
			}
		}
		n, mem := make([]int64, len(warms)), make([]int64, len(warms))
		var ephN, ephMem int64
		for _, pid := range pids {
			b, ok := rssBytes(pid)
			if !ok {
				continue // exited, or a zombie not yet reaped
			}
			if i, ok := warm[pid]; ok {
				n[i]++
				mem[i] += b
				continue
			}
			ephN++
			ephMem += b
		}
		for i := range warms {
			o.ObserveInt64(count, n[i], labels[i].warm)
			o.ObserveInt64(rss, mem[i], labels[i].warm)
		}
		o.ObserveInt64(count, ephN, ephAttr)
		o.ObserveInt64(rss, ephMem, ephAttr)
		return nil
	}, restarts, hangKills, coldStarts, ready, count, rss, ephTokens, queue, devUsed, devTotal)
	if err != nil {
		return fmt.Errorf("telemetry: registering the worker gauges: %w", err)
	}
	return nil
}

// ephAttr labels the ephemeral workers' count and memory.
var ephAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("role", RoleEphemeral)))

// workerLabels are one warm worker's attribute sets, built once at registration.
type workerLabels struct {
	model metric.MeasurementOption // model=NAME, or nothing
	warm  metric.MeasurementOption // role="warm", model
	queue metric.MeasurementOption // queue="ephemeral", model
}

// newWorkerLabels returns the labels of each of models, or of the one unnamed
// warm worker when there are none.
func newWorkerLabels(models []WarmModel) []workerLabels {
	names := []string{""}
	if len(models) > 0 {
		names = names[:0]
		for _, m := range models {
			names = append(names, m.Name)
		}
	}
	out := make([]workerLabels, len(names))
	for i, name := range names {
		var model []attribute.KeyValue
		if name != "" {
			model = append(model, stage.ModelKey.String(name))
		}
		with := func(kv attribute.KeyValue) metric.MeasurementOption {
			return metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{kv}, model...)...))
		}
		out[i] = workerLabels{
			model: metric.WithAttributeSet(attribute.NewSet(model...)),
			warm:  with(attribute.String("role", RoleWarm)),
			queue: with(attribute.String("queue", RoleEphemeral)),
		}
	}
	return out
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

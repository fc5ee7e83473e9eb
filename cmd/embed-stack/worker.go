package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/llama"
	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/telemetry"
)

// workerCommand is `embed-stack worker`: one llama.cpp context serving the worker
// protocol on a Unix socket. serve starts it; running it by hand is for debugging
// (--ignore-stdin keeps it up with stdin on /dev/null).
type workerCommand struct {
	args   backends.WorkerArgs
	logger *slog.Logger
	stderr io.Writer
}

func newWorker(args []string, stdout, stderr io.Writer) (command, int) {
	c := &workerCommand{stderr: stderr}
	err := c.args.Parse(args)
	if err == nil {
		if c.logger, err = telemetry.NewLogger(stderr, c.args.LogFormat, c.args.LogLevel); err == nil {
			err = checkDevice(c.args.DeviceArgs)
		}
	}
	if err != nil {
		return nil, flagconfig.Report(err, "embed-stack worker", stdout, stderr)
	}
	return c, 0
}

// Close does nothing: the worker drains its requests and exits on the first
// signal (backends.RunWorker), or when its stdin reaches EOF.
func (c *workerCommand) Close() error { return nil }

// Run loads the model and serves it until ctx ends or stdin reaches EOF.
func (c *workerCommand) Run(ctx context.Context) error {
	a, logger, stderr := c.args, c.logger, c.stderr
	// package llama logs through slog's default: llama.cpp's own lines and the
	// engine's (at debug level, as --log-level debug promises), in this format.
	slog.SetDefault(logger)
	tel, err := startTelemetry("worker", false, logger)
	if err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return exitStatus(2)
	}
	defer tel.Stop()
	if a.Nice > 0 {
		// An ephemeral worker: all of it (the model's load and conversion as well as
		// the decoding the engine lowers) yields to the warm worker's queries.
		if err := llama.LowerProcess(a.Nice); err != nil {
			logger.Warn("lowering the worker's priority failed; it runs at normal priority", "nice", a.Nice, "err", err)
		}
	}
	warmUpLengths := a.Buckets
	cfg := backends.WorkerConfig{SocketPath: a.Socket, IgnoreStdin: a.IgnoreStdin, Logger: logger}
	load := func() (backends.Engine, backends.EngineInfo, error) {
		c := llama.Config{
			ModelPath: a.Model, ContextTokens: a.Ctx, BatchTokens: a.Batch,
			Threads: a.Threads, MaxSeqs: a.Seqs, Nice: a.Nice,
			Rerank:      a.Task == backends.TaskRerank,
			IdleRelease: a.ReleaseKV,
		}
		if a.Pooling != "" {
			// WorkerArgs.Parse accepted only mean, cls and last.
			c.Pooling, _ = gguf.ParsePooling(a.Pooling)
		}
		deviceConfig(a.DeviceArgs, &c)
		e, err := llama.Open(c)
		if err != nil {
			return nil, backends.EngineInfo{}, explainDeviceError(err)
		}
		// Loading parsed the GGUF's vocabulary and merges in Go (tens of MB, garbage
		// now): hand those pages back before the contexts' KV caches are touched, so
		// that they do not sit in the worker's peak beside them (serve does the same).
		debug.FreeOSMemory()
		d := e.Info().Device
		logger.Info("device", "device", d.Name, "description", d.Description, "backend", d.Backend,
			"gpu_layers", d.GPULayers, "memory_total_mib", d.MemoryTotal>>20, "memory_free_mib", d.MemoryFree>>20, "note", d.Note,
			"cpu_variant", d.CPUVariant, "cpu_variant_note", d.CPUVariantNote)
		if d.Warning != "" {
			logger.Warn("slower CPU kernels than this CPU allows", "cpu_variant", d.CPUVariant, "warning", d.Warning)
		}
		// Log before and after warming: the serve side's ready timer is a stall
		// timer that any worker output resets, so a slow warm-up on a loaded
		// machine is not mistaken for a hang.
		if len(warmUpLengths) > 0 {
			start := time.Now()
			logger.Info("model loaded; warming up", "buckets", warmUpLengths)
			if err := e.WarmUp(context.Background(), warmUpLengths); err != nil {
				e.Close()
				return nil, backends.EngineInfo{}, err
			}
			logger.Info("warmed up", "buckets", warmUpLengths, "ms", time.Since(start).Milliseconds())
		}
		info := e.Info()
		name := info.ModelName
		if name == "" {
			name = filepath.Base(a.Model)
		}
		return e, backends.EngineInfo{NEmbd: info.NEmbd, MaxTokens: info.ContextTokens, MaxBatchTokens: info.BatchTokens,
			Model: name, Device: &info.Device, ShortJobs: info.ShortJobs}, nil
	}
	if err := backends.RunWorker(ctx, cfg, traceLoad(load)); err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return exitStatus(1)
	}
	_ = os.Stdout.Sync()
	return nil
}

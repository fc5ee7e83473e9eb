package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/llama"
)

// runWorker is `embed-stack worker`: one llama.cpp context serving the worker
// protocol on a Unix socket. serve starts it; running it by hand is for debugging
// (--ignore-stdin keeps it up with stdin on /dev/null).
func runWorker(args []string, stderr io.Writer) int {
	var a backends.WorkerArgs
	if err := a.Parse(args, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	logger, err := newLogger(stderr, a.LogFormat, a.LogLevel)
	if err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return 2
	}
	if err := checkDevice(a.DeviceArgs); err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return 2
	}
	tel, err := startTelemetry("worker", false, logger)
	if err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return 2
	}
	defer tel.stop()
	warmUpLengths := a.Buckets
	cfg := backends.WorkerConfig{SocketPath: a.Socket, IgnoreStdin: a.IgnoreStdin, Logger: logger}
	load := func() (backends.Engine, backends.EngineInfo, error) {
		c := llama.Config{
			ModelPath: a.Model, ContextTokens: a.Ctx, BatchTokens: a.Batch,
			Threads: a.Threads, MaxSeqs: a.Seqs, Nice: a.Nice,
			Rerank: a.Task == backends.TaskRerank,
		}
		deviceConfig(a.DeviceArgs, &c)
		e, err := llama.Open(c)
		if err != nil {
			return nil, backends.EngineInfo{}, explainDeviceError(err)
		}
		d := e.Info().Device
		logger.Info("device", "device", d.Name, "description", d.Description, "backend", d.Backend,
			"gpu_layers", d.GPULayers, "memory_total_mib", d.MemoryTotal>>20, "memory_free_mib", d.MemoryFree>>20, "note", d.Note)
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
	if err := backends.RunWorker(context.Background(), cfg, traceLoad(load)); err != nil {
		fmt.Fprintln(stderr, "embed-stack worker:", err)
		return 1
	}
	_ = os.Stdout.Sync()
	return 0
}

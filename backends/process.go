package backends

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/embed-stack/embed-stack/internal/tail"
)

// WorkerSpec says how to start a worker process, for example
//
//	exe, _ := os.Executable()
//	WorkerSpec{Path: exe, Args: append([]string{"worker"}, WorkerArgs{Model: model}.Args()...)}
//
// backends appends "--socket PATH" (and, for [Ephemeral], "--ctx N" before it) to
// Args, so Args should hold neither flag.
type WorkerSpec struct {
	Path string   // the executable
	Args []string // arguments after the program name
	// Env is added to the parent's environment (later entries win), so a spec only
	// lists what it changes.
	Env []string
	// Output, when set, also receives the worker's stderr and stdout (for example
	// os.Stderr, to show llama.cpp's log). They are always kept in a bounded tail that
	// errors quote. Write errors are ignored so that they cannot stall the worker.
	Output io.Writer
}

const (
	// tailBytes bounds the worker output kept for error messages.
	tailBytes = 8 << 10

	// healthPoll is how often readiness is polled; a model load takes far longer,
	// and an idle poll costs one local HTTP request.
	healthPoll = 25 * time.Millisecond

	// healthTimeout bounds one /health request while waiting for readiness, so a
	// worker that accepts connections but never answers still trips the stall timer.
	healthTimeout = time.Second
)

// proc is one worker process. Its reaper goroutine is the only caller of
// cmd.Wait; everyone else selects on done.
type proc struct {
	cmd    *exec.Cmd
	pid    int
	socket string
	client *Client
	stdin  io.WriteCloser // the parent's end of the worker's stdin; closing it stops the worker
	tail   *tail.Buffer
	cancel context.CancelFunc // ends the exec context: SIGTERM now, SIGKILL after WaitDelay

	done    chan struct{} // closed by the reaper once cmd.Wait has returned
	waitErr error         // cmd.Wait's result; read only after done is closed
}

// startProc starts spec with "--socket socket" appended after extraArgs. Ending
// ctx stops the worker as stop does, without waiting. stopTimeout is the grace
// between SIGTERM and SIGKILL.
func startProc(ctx context.Context, spec WorkerSpec, socket string, extraArgs []string, stopTimeout time.Duration) (*proc, error) {
	if spec.Path == "" {
		return nil, errors.New("backends: WorkerSpec.Path is empty; give the worker executable (os.Executable() for embed-stack itself)")
	}
	if err := checkSocketPath(socket); err != nil {
		return nil, err
	}
	// A socket left by a worker that was SIGKILLed would make the new one refuse to
	// start.
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the stale socket %s: %w", socket, err)
	}
	args := slices.Concat(spec.Args, extraArgs, WorkerArgs{Socket: socket}.Args())
	pctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(pctx, spec.Path, args...)
	cmd.Env = append(append(os.Environ(), spec.Env...), traceEnv(ctx)...)
	out := tail.New(tailBytes, spec.Output)
	// One writer for both streams: exec then shares one pipe, keeping their order.
	cmd.Stdout = out
	cmd.Stderr = out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("worker stdin: %w", err)
	}
	cmd.Cancel = func() error { return terminate(cmd) }
	cmd.WaitDelay = stopTimeout
	isolate(cmd)
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting the worker %s: %w", spec.Path, err)
	}
	p := &proc{
		cmd:    cmd,
		pid:    cmd.Process.Pid,
		socket: socket,
		client: NewClient(socket),
		stdin:  stdin,
		tail:   out,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	p.client.pid = p.pid
	go p.reap()
	return p, nil
}

func (p *proc) reap() {
	p.waitErr = p.cmd.Wait()
	p.cancel()
	p.client.Close()
	close(p.done)
}

// exited reports whether the process has been reaped.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes the exit; call it only after done is closed.
func (p *proc) exitError() *ExitError {
	return &ExitError{PID: p.pid, Err: p.waitErr, Output: p.tail.String()}
}

// waitReady polls /health until the worker is ready. It fails when ctx ends, when
// the process exits (the error carries its output), or when stall passes without
// progress: output written, or the socket starting to answer "loading". Progress
// resets the stall timer, so a slow load that keeps logging is not cut short.
func (p *proc) waitReady(ctx context.Context, stall time.Duration) (Health, error) {
	ticker := time.NewTicker(healthPoll)
	defer ticker.Stop()
	stallTimer := time.NewTimer(stall)
	defer stallTimer.Stop()
	written, answering := p.tail.Written(), false
	for {
		select {
		case <-ctx.Done():
			return Health{}, fmt.Errorf("waiting for the worker (pid %d) to be ready: %w", p.pid, ctx.Err())
		case <-p.done:
			return Health{}, p.exitError()
		case <-stallTimer.C:
			return Health{}, fmt.Errorf("%w: the worker (pid %d) made no progress for %s (raise ReadyTimeout if the model needs longer to load); its output ends with:\n%s",
				ErrReadyTimeout, p.pid, stall, p.tail.String())
		case <-ticker.C:
			hctx, cancel := context.WithTimeout(ctx, healthTimeout)
			h, err := p.client.Health(hctx)
			cancel()
			if err == nil && h.Status == StatusReady {
				return h, nil
			}
			progressed := false
			if n := p.tail.Written(); n != written {
				written, progressed = n, true
			}
			if err == nil && !answering {
				answering, progressed = true, true
			}
			if progressed {
				stallTimer.Reset(stall)
			}
		}
	}
}

// stop closes the worker's stdin and sends SIGTERM, then waits for it to exit;
// WaitDelay turns that into SIGKILL after stopTimeout. If ctx ends first the worker
// is killed at once. The error says whether it had to be killed.
func (p *proc) stop(ctx context.Context) error {
	_ = p.stdin.Close() // the worker's own EOF path; closing twice is harmless
	p.cancel()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("worker (pid %d) was killed: it did not exit before %w", p.pid, ctx.Err())
	}
}

// kill sends SIGKILL and waits for the reaper.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill() // fails only when the process is already gone
	<-p.done
}

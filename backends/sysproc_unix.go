//go:build unix

package backends

import (
	"os/exec"
	"syscall"
)

// isolate puts the worker in a process group of its own, so that a terminal's
// Ctrl-C (SIGINT to the whole foreground group) reaches only the server, which
// then drains its requests and stops the worker in order, instead of the worker
// dying under requests still in flight.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminate asks a worker to stop; RunWorker drains and exits on SIGTERM.
func terminate(cmd *exec.Cmd) error { return cmd.Process.Signal(syscall.SIGTERM) }

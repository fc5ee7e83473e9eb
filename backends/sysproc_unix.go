//go:build unix

package backends

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// isolate puts the worker in a process group of its own, so that a terminal's
// Ctrl-C (SIGINT to the whole foreground group) reaches only the server, which
// then drains its requests and stops the worker in order, instead of the worker
// dying under requests still in flight. Where the OS can (Linux), the worker is
// also killed as soon as its parent dies, even by SIGKILL: the stdin EOF that
// stops it elsewhere is only seen between requests, and a decode in progress
// kept an orphan alive for seconds.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

// terminate asks a worker to stop; RunWorker drains and exits on SIGTERM.
func terminate(cmd *exec.Cmd) error { return cmd.Process.Signal(syscall.SIGTERM) }

// processAlive says whether pid names a running process (of any user). A zombie,
// exited but not yet reaped (a SIGKILLed process whose parent has not waited), is
// not running.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return (err == nil || errors.Is(err, syscall.EPERM)) && !zombie(pid)
}

// ownedByUs says whether path belongs to this process's user.
func ownedByUs(path string) bool {
	st, err := os.Lstat(path)
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Getuid()
}

// exhausted says whether err is the OS running out of something that frees up
// again (disk space or inodes, descriptors, processes, memory): the request that
// met it may succeed later, so it is a 503, not a 500.
func exhausted(err error) bool {
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EMFILE, syscall.ENFILE, syscall.EAGAIN, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

//go:build unix

package llama

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"syscall"
)

// lowerPriority sets the nice value of the calling thread (Linux) or process
// (elsewhere) to n.
func lowerPriority(n int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, 0, n)
}

// LowerProcess sets the nice value of every thread of the process to n, for a
// process that does nothing but background work (an ephemeral worker: its model
// load and weight conversion too, not only its decoding). On Linux, where a nice
// value is a thread's, each thread in /proc/self/task is set, again until a pass
// finds no thread it had not set (threads started later inherit the value of the
// thread that starts them); elsewhere the process's.
func LowerProcess(n int) error {
	if runtime.GOOS != "linux" {
		return syscall.Setpriority(syscall.PRIO_PROCESS, 0, n)
	}
	done := map[int]bool{}
	for pass := 0; pass < 10; pass++ {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		fresh := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
			done[tid] = true
		}
		if !fresh {
			return nil
		}
	}
	return nil
}

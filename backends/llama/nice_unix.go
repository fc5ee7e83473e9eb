//go:build unix

package llama

import "syscall"

// lowerPriority sets the nice value of the calling thread (Linux) or process
// (elsewhere) to n.
func lowerPriority(n int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, 0, n)
}

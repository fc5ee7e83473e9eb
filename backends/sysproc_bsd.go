//go:build unix && !linux

package backends

import "syscall"

// dieWithParent has no kernel support here; the worker stops on stdin EOF.
func dieWithParent(*syscall.SysProcAttr) {}

// zombie cannot be told cheaply here; a zombie counts as alive.
func zombie(int) bool { return false }

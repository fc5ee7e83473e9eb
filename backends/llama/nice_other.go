//go:build !unix

package llama

import "errors"

func lowerPriority(int) error {
	return errors.New("thread priorities are not supported on this platform")
}

// LowerProcess lowers the process's priority, unsupported on this platform.
func LowerProcess(int) error { return lowerPriority(0) }

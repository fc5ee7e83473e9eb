//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// Package filelock takes exclusive advisory locks on files (flock), so that processes
// that share a cache (two servers starting at once, or this program and
// huggingface_hub) never write one entry at once. It knows nothing of what the lock
// guards.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockPollInterval is how often a waiter retries a lock held by another process.
const lockPollInterval = 200 * time.Millisecond

// Lock takes an exclusive flock on path (created if missing) and returns the function
// that releases it. flock cannot wait on a context, so a held lock is polled without
// blocking; onWait is called once when the wait begins. The lock is the one Python's
// filelock takes on the same file, so hub and huggingface_hub never download one
// blob at once.
func Lock(ctx context.Context, path string, onWait func()) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	fd := int(f.Fd())
	var tick *time.Ticker
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if tick != nil {
				tick.Stop()
			}
			return func() {
				syscall.Flock(fd, syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if tick == nil {
			tick = time.NewTicker(lockPollInterval)
			if onWait != nil {
				onWait()
			}
		}
		select {
		case <-ctx.Done():
			tick.Stop()
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

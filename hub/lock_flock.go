//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockPollInterval is how often a waiter retries a lock held by another download.
const lockPollInterval = 200 * time.Millisecond

// lockFile takes an exclusive flock on path, the lock Python's filelock takes on the
// same file, so this package and huggingface_hub never download one blob at once. flock
// cannot wait on a context, so a held lock is polled without blocking; onWait is called
// once when the wait begins.
func lockFile(ctx context.Context, path string, onWait func()) (func(), error) {
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

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package hub

import "context"

// lockFile is a no-op where flock is unavailable: two concurrent downloads of one blob
// may then interleave, and the sha256 check refuses the result, so the worst case is a
// failed start that a rerun fixes.
func lockFile(ctx context.Context, path string, onWait func()) (func(), error) {
	return func() {}, ctx.Err()
}

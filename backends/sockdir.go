package backends

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// socketDirPrefix starts the name of every private socket directory:
// embed-stack-<pid of the supervising process>-<random>. The pid lets a later
// process remove the directories of one that was SIGKILLed (removeStaleSocketDirs),
// which could not remove them itself.
const socketDirPrefix = "embed-stack-"

// mkdirTemp is os.MkdirTemp; tests replace it to simulate a full file system.
var mkdirTemp = os.MkdirTemp

// newSocketDir creates a private (0700) socket directory under parent ("" =
// os.TempDir()).
func newSocketDir(parent string) (string, error) {
	return mkdirTemp(parent, socketDirPrefix+strconv.Itoa(os.Getpid())+"-")
}

// removeStaleSocketDirs removes the socket directories under parent ("" =
// os.TempDir()) that belong to this user and were made by a process that no
// longer runs: what a SIGKILLed server or `embed` leaves behind. A directory of a
// live process, or of another user, is left alone; so is any whose owner cannot be
// told (an older naming without the pid).
func removeStaleSocketDirs(parent string, logger *slog.Logger) {
	if parent == "" {
		parent = os.TempDir()
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		pidText, rest, ok := strings.Cut(strings.TrimPrefix(e.Name(), socketDirPrefix), "-")
		if !e.IsDir() || !strings.HasPrefix(e.Name(), socketDirPrefix) || !ok || rest == "" {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if !ownedByUs(dir) || processAlive(pid) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			logger.Warn("removing a dead process's worker socket directory", "dir", dir, "err", err)
			continue
		}
		logger.Info("removed the worker socket directory of a process that no longer runs", "dir", dir, "pid", pid)
	}
}

// RemoveOwnSocketDirs removes every socket directory this process made under parent
// ("" = os.TempDir()), with whatever it holds. It is for a process about to exit,
// whose workers are gone or dying with it: a path out that skipped a Close (a second
// signal, a start abandoned midway) would otherwise leave its directories for the
// next process's removeStaleSocketDirs. Never call it while this process still runs
// workers: their sockets are in those directories.
func RemoveOwnSocketDirs(parent string) {
	if parent == "" {
		parent = os.TempDir()
	}
	dirs, _ := filepath.Glob(filepath.Join(parent, socketDirPrefix+strconv.Itoa(os.Getpid())+"-*"))
	for _, dir := range dirs {
		if st, err := os.Lstat(dir); err == nil && st.IsDir() && ownedByUs(dir) {
			_ = os.RemoveAll(dir)
		}
	}
}

// ensureSocketDir returns dir if it is still a private directory of ours, or a
// fresh one under parent: something (a tmp cleaner) may have removed it while the
// server ran, and a worker cannot listen in a directory that is gone. A directory
// recreated by someone else at the same path is not trusted.
func ensureSocketDir(dir, parent string) (string, bool, error) {
	if st, err := os.Lstat(dir); err == nil && st.IsDir() && st.Mode().Perm() == 0o700 && ownedByUs(dir) {
		return dir, false, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("checking the worker socket directory %s: %w", dir, err)
	}
	fresh, err := newSocketDir(parent)
	if err != nil {
		return "", false, fmt.Errorf("recreating the worker socket directory (Warm.SocketDir %q): %w", parent, err)
	}
	return fresh, true, nil
}

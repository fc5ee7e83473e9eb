// Package buildinfo says which build of embed-stack is running: the version stamped at
// link time and the commit the Go toolchain recorded. `embed-stack --version`, the
// service.version of every span, /info and the build_info metric all read it here, so
// they can never disagree.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Version and Commit are set at link time: `make build` passes
// -ldflags "-X github.com/embed-stack/embed-stack/internal/buildinfo.Version=$(git describe) -X ...Commit=$(git rev-parse HEAD)".
// A plain `go build` leaves Version "dev" and Commit empty; Commit then falls back to the
// Go toolchain's VCS stamp, which some machines turn off (GOFLAGS=-buildvcs=false).
var (
	Version = "dev"
	Commit  = ""
)

// CPUBaseline is the -march the compiled-in CPU kernels were built for, stamped by
// `make build` (MARCH: "native" by default, "x86-64-v2" for the portable build of
// the image and the release archives); "" for a plain `go build`. A build for
// anything but native relies on the CPU kernel variant libraries for speed, so a
// worker warns when it finds none (backends/cpuvariant).
var CPUBaseline = ""

// Info is what a build knows about itself. Safe for concurrent use (it is a value).
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`     // full revision, "" when built outside git
	Modified  bool   `json:"modified"`   // the work tree had uncommitted changes
	GoVersion string `json:"go_version"` // toolchain that built the binary
}

var read = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return stamped(Version, Commit, bi)
})

// stamped is the Info of a build stamped with version and commit (by `make build`,
// or "dev" and "" by a plain `go build`), whose toolchain recorded bi (nil: none).
// A stamped commit's work tree was modified when `git describe --dirty` said so in
// the version ("v0.3.0-4-g587bbd6-dirty"); an unstamped one's, when the
// toolchain's VCS stamp says so.
func stamped(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if commit != "" {
		info.Modified = strings.HasSuffix(version, "-dirty")
		return info
	}
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	return info
}

// Get returns the build's version, commit and toolchain.
func Get() Info { return read() }

// String is the one-line form `embed-stack --version` prints:
// "embed-stack v0.3.0 (commit 587bbd6c1a2b, go1.26.8)".
func (i Info) String() string {
	commit := i.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit == "" {
		commit = "unknown"
	}
	if i.Modified {
		commit += "+dirty"
	}
	return "embed-stack " + i.Version + " (commit " + commit + ", " + i.GoVersion + ")"
}

package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestString(t *testing.T) {
	cases := []struct {
		in   Info
		want string
	}{
		{Info{Version: "v1.2.3", Commit: "587bbd6c1a2b3c4d5e6f", GoVersion: "go1.26.8"}, "embed-stack v1.2.3 (commit 587bbd6c1a2b, go1.26.8)"},
		{Info{Version: "dev", Commit: "abc", Modified: true, GoVersion: "go1.26.8"}, "embed-stack dev (commit abc+dirty, go1.26.8)"},
		{Info{Version: "dev", GoVersion: "go1.26.8"}, "embed-stack dev (commit unknown, go1.26.8)"},
	}
	for _, c := range cases {
		if got := c.in.String(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.in, got, c.want)
		}
	}
}

// A build stamped from a modified work tree says so in /info's "modified" as its
// version does ("-dirty"), and the toolchain's VCS stamp speaks for an unstamped one.
func TestStampedModified(t *testing.T) {
	vcs := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}}
	cases := []struct {
		version, commit string
		bi              *debug.BuildInfo
		wantCommit      string
		wantModified    bool
	}{
		{"583ad48-dirty", "583ad48ffff", vcs, "583ad48ffff", true},
		{"v0.3.0", "587bbd6", vcs, "587bbd6", false},
		{"dev", "", vcs, "abc", true},
		{"dev", "", nil, "", false},
	}
	for _, c := range cases {
		got := stamped(c.version, c.commit, c.bi)
		if got.Commit != c.wantCommit || got.Modified != c.wantModified || got.Version != c.version {
			t.Errorf("stamped(%q, %q): %+v, want commit %q, modified %t", c.version, c.commit, got, c.wantCommit, c.wantModified)
		}
	}
}

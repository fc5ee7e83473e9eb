package buildinfo

import "testing"

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

package hostmem

import (
	"runtime"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := "MemTotal:       24557816 kB\nMemFree:        19000000 kB\nMemAvailable:   21474836 kB\n"
	got, ok := Parse(strings.NewReader(in))
	if want := (Info{Total: 24557816 << 10, Available: 21474836 << 10}); !ok || got != want {
		t.Errorf("Parse = %+v, %v; want %+v, true", got, ok, want)
	}
	for _, in := range []string{"MemTotal: 1 kB\n", "MemAvailable: 1 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\n", ""} {
		if got, ok := Parse(strings.NewReader(in)); ok {
			t.Errorf("Parse(%q) = %+v, true; want false", in, got)
		}
	}
}

func TestRead(t *testing.T) {
	got, ok := Read()
	if runtime.GOOS != "linux" {
		t.Skip("no /proc/meminfo here")
	}
	if !ok || got.Total <= 0 || got.Available <= 0 || got.Available > got.Total {
		t.Errorf("Read = %+v, %v; want 0 < Available <= Total", got, ok)
	}
}

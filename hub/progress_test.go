package hub

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fakeClock is advanced by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func testProgress(terminal bool, total int64) (*progress, *fakeClock, *bytes.Buffer, *bytes.Buffer) {
	clock := &fakeClock{t: time.Date(2025, 6, 5, 12, 0, 0, 0, time.UTC)}
	var bar, logs bytes.Buffer
	c := &client{log: slog.New(slog.NewJSONHandler(&logs, nil)), progress: &bar, terminal: terminal, clockNow: clock.now}
	return newProgress(c, "m.gguf", total), clock, &bar, &logs
}

func TestProgressBar(t *testing.T) {
	p, clock, bar, logs := testProgress(true, 600e6)
	p.begin(0)
	clock.t = clock.t.Add(3 * time.Second)
	p.add(150e6)
	clock.t = clock.t.Add(50 * time.Millisecond)
	p.add(1e6) // within the redraw interval: not drawn
	clock.t = clock.t.Add(time.Second)
	p.add(449e6)
	p.end()

	want := "\rm.gguf   0% [>                       ] 0.0/600.0 MB     -- MB/s  ETA --" +
		"\rm.gguf  25% [======>                 ] 150.0/600.0 MB   50.0 MB/s  ETA 9s" +
		"\rm.gguf 100% [========================] 600.0/600.0 MB  148.1 MB/s  done  " +
		"\rm.gguf 100% [========================] 600.0/600.0 MB  148.1 MB/s  done\n"
	if got := bar.String(); got != want {
		t.Fatalf("bar output\n%q\nwant\n%q", got, want)
	}
	if logs.Len() != 0 {
		t.Fatalf("terminal mode logged %q", logs)
	}
}

func TestProgressResumedAndUnknownSize(t *testing.T) {
	p, clock, bar, _ := testProgress(true, 100e6)
	p.begin(40e6)
	clock.t = clock.t.Add(2 * time.Second)
	p.add(20e6) // the rate counts this run's 20 MB, not the resumed 40
	if got, want := p.line(), "m.gguf  60% [==============>         ] 60.0/100.0 MB   10.0 MB/s  ETA 4s"; got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
	p.restart()
	clock.t = clock.t.Add(time.Second)
	p.add(5e6)
	if got, want := p.line(), "m.gguf   5% [=>                      ] 5.0/100.0 MB    5.0 MB/s  ETA 19s"; got != want {
		t.Fatalf("after restart %q, want %q", got, want)
	}
	_ = bar

	u, clock, _, _ := testProgress(true, -1)
	u.begin(0)
	clock.t = clock.t.Add(time.Second)
	u.add(3e6)
	if got, want := u.line(), "m.gguf 3.0 MB    3.0 MB/s"; got != want {
		t.Fatalf("unknown size %q, want %q", got, want)
	}
}

func TestProgressLogLines(t *testing.T) {
	p, clock, bar, logs := testProgress(false, 1000e6)
	p.begin(250e6) // resumed at 25%: the first line is 30%
	for range 15 {
		clock.t = clock.t.Add(time.Second)
		p.add(50e6)
	}
	p.end()
	if bar.Len() != 0 {
		t.Fatalf("bar drawn without a terminal: %q", bar)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "time")
		delete(m, "level")
		b, _ := json.Marshal(m)
		got = append(got, string(b))
	}
	want := []string{
		`{"file":"m.gguf","msg":"downloading model","resumed_at_mb":250,"size_mb":1000}`,
		`{"downloaded_mb":300,"eta":"14s","file":"m.gguf","mb_per_s":50,"msg":"download progress","percent":30,"size_mb":1000}`,
		`{"downloaded_mb":400,"eta":"12s","file":"m.gguf","mb_per_s":50,"msg":"download progress","percent":40,"size_mb":1000}`,
		`{"downloaded_mb":500,"eta":"10s","file":"m.gguf","mb_per_s":50,"msg":"download progress","percent":50,"size_mb":1000}`,
		`{"downloaded_mb":600,"eta":"8s","file":"m.gguf","mb_per_s":50,"msg":"download progress","percent":60,"size_mb":1000}`,
		`{"downloaded_mb":700,"eta":"6s","file":"m.gguf","mb_per_s":50,"msg":"download progress","percent":70,"size_mb":1000}`,
		`{"downloaded_mb":800,"eta":"4s","file":"m.gguf","mb_per_s":50,"msg":"download progress","percent":80,"size_mb":1000}`,
		`{"downloaded_mb":900,"eta":"2s","file":"m.gguf","mb_per_s":50,"msg":"download progress","percent":90,"size_mb":1000}`,
		`{"downloaded_mb":1000,"eta":"0s","file":"m.gguf","mb_per_s":50,"msg":"download progress","percent":100,"size_mb":1000}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

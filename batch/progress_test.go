package batch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is progress's clock, moved by the test.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time     { return c.t }
func (c *fakeClock) at(d time.Duration) { c.t = t0.Add(d) }
func fixedTotal(n int64) func() int64   { return func() int64 { return n } }
func ms(n int) time.Duration            { return time.Duration(n) * time.Millisecond }
func barOf(t *testing.T, b *bytes.Buffer) []string {
	t.Helper()
	return strings.Split(strings.TrimPrefix(b.String(), "\r"), "\r")
}

// TestProgressBar: the percentage is items (16 of 200 is 8%, whatever their bytes),
// the rate appears after its first window (rateWindow) and is smoothed after, and the
// ETA, once shown, stays: "0s" while the last items are in flight, where it used to
// blank to "--" (issue 27).
func TestProgressBar(t *testing.T) {
	clk := &fakeClock{t: t0}
	var bar bytes.Buffer
	p := newProgress(&Job{Progress: &bar, Terminal: true}, quietLogger(), fixedTotal(200))
	p.now = clk.now
	step := func(d time.Duration, done int64) {
		clk.at(d)
		p.update(count{done: done, embedded: done})
	}
	step(0, 16)        // the first batch: the rate's window starts here
	step(ms(100), 24)  // under a window: no rate yet
	step(ms(500), 32)  // (32-16)/0.5s = 32 items/s
	step(ms(1000), 48) // 32 items/s again
	step(ms(3000), 176)
	step(ms(3100), 184) // under barRedraw: not drawn
	step(ms(3400), 192)
	p.finish(count{done: 200, embedded: 200}, true)
	want := []string{
		"  8% [=>                      ] 16/200 items  -- items/s  ETA --",
		// 24 at 100 ms: under barRedraw, not drawn.
		" 16% [===>                    ] 32/200 items  32.0 items/s  ETA 5s",
		" 24% [=====>                  ] 48/200 items  32.0 items/s  ETA 5s",
		// (176-48)/2s = 64 items/s, smoothed: 32 + (1-e^-0.2)·32 = 37.8.
		" 88% [=====================>  ] 176/200 items  37.8 items/s  ETA 1s",
		// (192-176)/0.4s = 40: 37.8 + (1-e^-0.04)·2.2 = 37.9.
		" 96% [=======================>] 192/200 items  37.9 items/s  ETA 0s",
		"100% [========================] 200/200 items  37.9 items/s  done  \n", // padded over the longer line before
	}
	if got := barOf(t, &bar); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("bar\n%q\nwant\n%q", got, want)
	}
}

// TestProgressRateSmoothed: one slow window (a worker restarting) moves the rate by
// 1-exp(-dt/10s) of the way, not all the way, and a burst of batches written within
// a window is measured with the window.
func TestProgressRateSmoothed(t *testing.T) {
	clk := &fakeClock{t: t0}
	p := newProgress(&Job{}, quietLogger(), fixedTotal(100000))
	p.now = clk.now
	n := int64(0)
	for i := range 11 { // 100 items/s for 10 s
		clk.at(time.Duration(i) * time.Second)
		p.update(count{done: n, embedded: n})
		n += 100
	}
	if p.rate != 100 {
		t.Fatalf("rate %v, want 100", p.rate)
	}
	clk.at(15 * time.Second) // 5 s for one batch of 100: 20 items/s
	p.update(count{done: n, embedded: n})
	if want := 100 + (1-0.6065306597)*(20-100); p.rate < want-0.001 || p.rate > want+0.001 {
		t.Errorf("rate after a slow window %v, want %.3f", p.rate, want)
	}
	before := p.rate
	clk.at(15*time.Second + ms(10)) // a burst: 4 batches in 10 ms
	p.update(count{done: n + 400, embedded: n + 400})
	if p.rate != before {
		t.Errorf("a burst within the window moved the rate from %v to %v", before, p.rate)
	}
}

// TestProgressTotalLater: until the items are counted the bar shows the count alone;
// once counted, the percentage and the ETA appear.
func TestProgressTotalLater(t *testing.T) {
	clk := &fakeClock{t: t0}
	var bar bytes.Buffer
	total := int64(-1)
	p := newProgress(&Job{Progress: &bar, Terminal: true}, quietLogger(), func() int64 { return total })
	p.now = clk.now
	p.update(count{done: 10, embedded: 10})
	clk.at(time.Second)
	p.update(count{done: 20, embedded: 20})
	total = 40
	clk.at(2 * time.Second)
	p.update(count{done: 30, embedded: 30})
	p.finish(count{done: 30, embedded: 30}, false) // stopped: no "done"
	want := []string{
		"10 items  -- items/s",
		"20 items  10.0 items/s",
		" 75% [==================>     ] 30/40 items  10.0 items/s  ETA 1s",
		" 75% [==================>     ] 30/40 items  10.0 items/s  ETA 1s\n",
	}
	if got := barOf(t, &bar); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("bar\n%q\nwant\n%q", got, want)
	}
}

// TestProgressResumedAndSkipped: a resumed run counts the items an earlier run wrote
// as done (7000 of 10000) while its rate is its own, and items skipped as invalid
// count as passed in the percentage.
func TestProgressResumedAndSkipped(t *testing.T) {
	clk := &fakeClock{t: t0}
	var bar bytes.Buffer
	p := newProgress(&Job{Progress: &bar, Terminal: true}, quietLogger(), fixedTotal(10000))
	p.now = clk.now
	p.update(count{done: 7100, embedded: 100})
	clk.at(2 * time.Second)
	p.update(count{done: 7500, embedded: 500, skipped: 500})
	want := []string{
		" 71% [=================>      ] 7100/10000 items  -- items/s  ETA --",
		// 400 items in 2 s; 2000 left.
		" 80% [===================>    ] 7500/10000 items  200.0 items/s  ETA 10s",
	}
	if got := barOf(t, &bar); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("bar\n%q\nwant\n%q", got, want)
	}
}

// TestProgressLog: without a terminal, a line per interval with the same figures.
func TestProgressLog(t *testing.T) {
	clk := &fakeClock{t: t0}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	p := newProgress(&Job{ProgressInterval: time.Second}, log, fixedTotal(200))
	p.now = clk.now
	p.update(count{done: 10, embedded: 10})
	clk.at(ms(500))
	p.update(count{done: 20, embedded: 20}) // under the interval: no line
	clk.at(4 * time.Second)
	p.update(count{done: 90, embedded: 90})
	lp := newProgress(&Job{ProgressInterval: time.Second}, log, nil) // standard input
	lp.now = clk.now
	lp.update(count{done: 5, embedded: 5})
	clk.at(5 * time.Second)
	lp.update(count{done: 15, embedded: 15})
	want := "level=INFO msg=\"embed progress\" done=90 total=200 percent=45 embedded=90 items_per_s=20 eta=6s\n" +
		"level=INFO msg=\"embed progress\" done=15 embedded=15 items_per_s=10\n"
	if logs.String() != want {
		t.Errorf("log\n%s\nwant\n%s", logs.String(), want)
	}
}

// TestCountItems: the count agrees with the Reader's items plus the lines it refuses,
// over blank lines, CRLF, whitespace lines, a last line without a newline, and lines
// split across the 1 MiB buffer.
func TestCountItems(t *testing.T) {
	long := strings.Repeat("x", 1<<20+7)
	cases := []struct {
		name, in string
		format   InputFormat
		want     int64
	}{
		{"lines", "a\nb\n\nc", Lines, 3},
		{"lines crlf", "a\r\n\r\n\r\nb\r\n", Lines, 2},
		{"lines spaces count", " \n\t\n\r\r\n", Lines, 3},
		{"lines long", long + "\n\n" + long, Lines, 2},
		{"jsonl blank", `{"id":1,"text":"a"}` + "\n \t\r\n\n" + `{"id":2,"text":"b"}`, JSONL, 2},
		{"jsonl invalid counts", "not json\n  x\n", JSONL, 2},
		{"jsonl long", " " + long + "\n   \n", JSONL, 1},
		{"empty", "", Lines, 0},
	}
	for _, c := range cases {
		got, err := CountItems(context.Background(), strings.NewReader(c.in), c.format)
		if err != nil || got != c.want {
			t.Errorf("%s: CountItems = %d, %v; want %d", c.name, got, err, c.want)
		}
		// The Reader's own account: items plus refused lines.
		r := NewReader(strings.NewReader(c.in), ReaderConfig{Format: c.format, MaxLineBytes: 2 << 20})
		var n int64
		for {
			_, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			var le *LineError
			if err != nil && !errors.As(err, &le) {
				t.Fatal(err)
			}
			n++
		}
		if n != c.want {
			t.Errorf("%s: the Reader passes %d items, want %d", c.name, n, c.want)
		}
	}
}

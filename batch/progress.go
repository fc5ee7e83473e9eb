package batch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"
)

const (
	defaultProgressInterval = 10 * time.Second
	// barRedraw is the least time between two redraws of the terminal bar.
	barRedraw = 200 * time.Millisecond
	barWidth  = 24
	// rateWindow is the least time between two samples of the rate: batches are
	// written in bursts (InFlight of them at once), and a rate over a burst alone
	// would swing the ETA. Short enough that a run of a few seconds gets an ETA.
	rateWindow = 250 * time.Millisecond
	// rateTau is the time constant of the rate's exponential smoothing: a sample
	// dt long moves the rate by 1-exp(-dt/rateTau) of the way to its own.
	rateTau = 10 * time.Second
)

// progress reports a run: a bar redrawn in place on a terminal, else a log line per
// interval. It counts items: done is the items written in all (those an earlier run
// wrote included, so a resumed run's count and percentage are of the whole input),
// and the percentage is of the input's items once they are counted (Job.CountItems),
// the items skipped as invalid counting as passed. The rate is this run's, smoothed
// (rateWindow, rateTau), and the ETA is the items left at that rate: once there is
// one it is always shown, "0s" when the last items are in flight. Used by the writer
// goroutine only.
type progress struct {
	w        io.Writer // nil: log lines
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time
	// total returns the input's items, or -1 while they are not known.
	total func() int64

	started  bool
	lastDraw time.Time
	lastLog  time.Time
	lineLen  int

	// The rate: sampled at an update at least rateWindow after the last sample.
	sampleAt    time.Time
	sampleItems int64
	rate        float64 // items per second; 0 until the first sample that saw items
}

func newProgress(j *Job, log *slog.Logger, total func() int64) *progress {
	p := &progress{log: log, interval: j.ProgressInterval, now: time.Now, total: total}
	if p.interval <= 0 {
		p.interval = defaultProgressInterval
	}
	if p.total == nil {
		p.total = func() int64 { return -1 }
	}
	if j.Terminal && j.Progress != nil {
		p.w = j.Progress
	}
	return p
}

// count is where a run stands: done items written in all (resumed ones included),
// embedded of them by this run, skipped as invalid.
type count struct{ done, embedded, skipped int64 }

// update records a batch written.
func (p *progress) update(c count) {
	t := p.now()
	if !p.started {
		// The first batch's own time is lost to the rate, but so is its count: the
		// rate starts at the first write, and the next batch is the first measured.
		p.started, p.sampleAt, p.sampleItems, p.lastLog = true, t, c.embedded, t
	}
	p.sample(c.embedded, t)
	if p.w != nil {
		if t.Sub(p.lastDraw) >= barRedraw {
			p.lastDraw = t
			p.draw(c, false)
		}
		return
	}
	if t.Sub(p.lastLog) >= p.interval {
		p.lastLog = t
		attrs := []any{"done", c.done}
		total := p.total()
		if total >= 0 {
			attrs = append(attrs, "total", total, "percent", round1(percent(c, total)))
		}
		attrs = append(attrs, "embedded", c.embedded)
		if p.rate > 0 {
			attrs = append(attrs, "items_per_s", round1(p.rate))
			if total >= 0 {
				attrs = append(attrs, "eta", p.eta(c, total).String())
			}
		}
		p.log.Info("embed progress", attrs...)
	}
}

// sample folds the rate since the last sample into the smoothed rate, once
// rateWindow has passed. The first sample that saw items sets it; it never returns
// to 0, so the ETA never blanks once shown.
func (p *progress) sample(items int64, t time.Time) {
	dt := t.Sub(p.sampleAt)
	if dt < rateWindow {
		return
	}
	r := float64(items-p.sampleItems) / dt.Seconds()
	p.sampleAt, p.sampleItems = t, items
	switch {
	case p.rate == 0:
		p.rate = r
	default:
		p.rate += (1 - math.Exp(-dt.Seconds()/rateTau.Seconds())) * (r - p.rate)
	}
}

// finish draws the bar one last time and ends its line; complete says the run read
// its whole input, so the bar shows 100% and "done" whatever the count said.
func (p *progress) finish(c count, complete bool) {
	if p.w != nil && p.started {
		p.draw(c, complete)
		fmt.Fprintln(p.w)
	}
}

// percent is the share of the input's items passed: written (in all) or skipped.
func percent(c count, total int64) float64 {
	if total <= 0 {
		return 100
	}
	return min(100, float64(c.done+c.skipped)*100/float64(total))
}

// eta is the time the items left take at the smoothed rate (0 before there is one).
func (p *progress) eta(c count, total int64) time.Duration {
	if p.rate <= 0 {
		return 0
	}
	left := float64(total - c.done - c.skipped)
	return time.Duration(max(0, left/p.rate) * float64(time.Second)).Round(time.Second)
}

// line renders "  45% [==========>           ] 90/200 items  8.1 items/s  ETA 14s":
// items done in all (resumed ones included) of the input's, and this run's rate.
// Until the items are counted (or when they cannot be: standard input) it renders
// "90 items  8.1 items/s"; before the first rate sample, "-- items/s  ETA --".
func (p *progress) line(c count, complete bool) string {
	speed := "-- items/s"
	if p.rate > 0 {
		speed = fmt.Sprintf("%.1f items/s", p.rate)
	}
	total := p.total()
	if complete {
		total = max(total, c.done+c.skipped)
	}
	if total < 0 {
		return fmt.Sprintf("%d items  %s", c.done, speed)
	}
	pct := percent(c, total)
	eta := "ETA --"
	switch {
	case complete:
		pct, eta = 100, "done"
	case p.rate > 0:
		eta = "ETA " + p.eta(c, total).String()
	}
	fill := int(pct * barWidth / 100)
	bar := strings.Repeat("=", fill)
	if fill < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-fill-1)
	}
	return fmt.Sprintf("%3.0f%% [%s] %d/%d items  %s  %s", pct, bar, c.done, total, speed, eta)
}

// draw rewrites the terminal line in place, padding over a longer previous line.
func (p *progress) draw(c count, complete bool) {
	l := p.line(c, complete)
	pad := ""
	if n := p.lineLen - len(l); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.lineLen = len(l)
	fmt.Fprint(p.w, "\r"+l+pad)
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// CountItems counts the items of an input in format: its lines, less the blank ones
// the Reader skips (an empty line; for JSONL one of spaces, tabs and CRs). A line the
// Reader refuses (not an item, too long) counts, as it is passed once skipped. It
// reads r to its end at the speed of bytes.IndexByte, holding 1 MiB; for a JSONL line
// it looks at the bytes up to the first that is not blank. A JSONL line of Unicode
// spaces alone, which the Reader skips, counts one too many.
func CountItems(ctx context.Context, r io.Reader, format InputFormat) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	// item says the current line holds an item; lineLen is its length so far and
	// cr that it ends in '\r' so far (for Lines, "\r" alone is an empty line).
	item, lineLen, cr := false, 0, false
	endLine := func() {
		if item || (format == Lines && (lineLen > 1 || (lineLen == 1 && !cr))) {
			n++
		}
		item, lineLen, cr = false, 0, false
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		m, err := r.Read(buf)
		b := buf[:m]
		for len(b) > 0 {
			nl := bytes.IndexByte(b, '\n')
			seg := b
			if nl >= 0 {
				seg = b[:nl]
			}
			if len(seg) > 0 {
				lineLen += len(seg)
				cr = seg[len(seg)-1] == '\r'
				if format == JSONL && !item {
					for _, c := range seg {
						if c != ' ' && c != '\t' && c != '\r' && c != '\v' && c != '\f' {
							item = true
							break
						}
					}
				}
			}
			if nl < 0 {
				break
			}
			endLine()
			b = b[nl+1:]
		}
		if err == io.EOF {
			if lineLen > 0 {
				endLine()
			}
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("count the input's items: %w", err)
		}
	}
}

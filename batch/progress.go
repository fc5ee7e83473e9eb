package batch

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

const (
	defaultProgressInterval = 10 * time.Second
	// barRedraw is the least time between two redraws of the terminal bar.
	barRedraw = 200 * time.Millisecond
	barWidth  = 24
)

// progress reports a run: a bar redrawn in place on a terminal, else a log line per
// interval. The item count and the percentage are both of the whole input (items an
// earlier run wrote count as done), so they agree on a resumed run. The rate counts
// this run's items only, and the ETA extrapolates the input bytes consumed since the
// first batch written, so items skipped by a resume inflate neither. Used by the
// writer goroutine only.
type progress struct {
	w        io.Writer // nil: log lines
	log      *slog.Logger
	total    int64 // input bytes; 0 when unknown
	interval time.Duration
	now      func() time.Time

	started  bool
	start    time.Time
	startPos int64
	pos      int64
	items    int64 // embedded by this run when the first batch was written
	lastDraw time.Time
	lastLog  time.Time
	lineLen  int
}

func newProgress(j *Job, log *slog.Logger) *progress {
	p := &progress{log: log, total: j.InputSize, interval: j.ProgressInterval, now: time.Now}
	if p.interval <= 0 {
		p.interval = defaultProgressInterval
	}
	if j.Terminal && j.Progress != nil {
		p.w = j.Progress
	}
	return p
}

// update records that this run wrote items vectors in all, that resumed items were
// found already written, and that the input is consumed up to pos.
func (p *progress) update(resumed, items, pos int64) {
	t := p.now()
	if !p.started {
		// The first batch's own time is lost to the rate, but so is its count: the
		// rate starts at the first write, and the next batch is the first measured.
		p.started, p.start, p.startPos, p.lastLog, p.items = true, t, pos, t, items
	}
	p.pos = pos
	if p.w != nil {
		if t.Sub(p.lastDraw) >= barRedraw {
			p.lastDraw = t
			p.draw(resumed, items, t)
		}
		return
	}
	if t.Sub(p.lastLog) >= p.interval {
		p.lastLog = t
		attrs := []any{"done", resumed + items, "embedded", items, "items_per_s", round1(p.rate(items, t))}
		if p.total > 0 {
			attrs = append(attrs, "percent", round1(p.percent()), "eta", p.eta(t).String())
		}
		p.log.Info("embed progress", attrs...)
	}
}

// finish draws the bar one last time and ends its line.
func (p *progress) finish(resumed, items int64) {
	if p.w != nil && p.started {
		p.draw(resumed, items, p.now())
		fmt.Fprintln(p.w)
	}
}

func (p *progress) rate(items int64, t time.Time) float64 {
	el := t.Sub(p.start).Seconds()
	if el <= 0 {
		return 0
	}
	return float64(items-p.items) / el
}

func (p *progress) percent() float64 {
	if p.total <= 0 {
		return 0
	}
	return min(100, float64(p.pos)*100/float64(p.total))
}

func (p *progress) eta(t time.Time) time.Duration {
	el := t.Sub(p.start).Seconds()
	done := p.pos - p.startPos
	if el <= 0 || done <= 0 || p.total <= 0 {
		return 0
	}
	left := float64(p.total-p.pos) / (float64(done) / el)
	return time.Duration(max(0, left) * float64(time.Second)).Round(time.Second)
}

// line renders "  45% [==========>           ] 12345 items  812.3 items/s  ETA 1m2s":
// items done in all (resumed ones included) and this run's rate.
func (p *progress) line(resumed, items int64, t time.Time) string {
	speed := fmt.Sprintf("%.1f items/s", p.rate(items, t))
	if p.total <= 0 {
		return fmt.Sprintf("%d items  %s", resumed+items, speed)
	}
	pct := p.percent()
	fill := int(pct * barWidth / 100)
	bar := strings.Repeat("=", fill)
	if fill < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-fill-1)
	}
	eta := "ETA --"
	switch {
	case p.pos >= p.total:
		eta = "done"
	case p.eta(t) > 0:
		eta = "ETA " + p.eta(t).String()
	}
	return fmt.Sprintf("%3.0f%% [%s] %d items  %s  %s", pct, bar, resumed+items, speed, eta)
}

// draw rewrites the terminal line in place, padding over a longer previous line.
func (p *progress) draw(resumed, items int64, t time.Time) {
	l := p.line(resumed, items, t)
	pad := ""
	if n := p.lineLen - len(l); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.lineLen = len(l)
	fmt.Fprint(p.w, "\r"+l+pad)
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

package hub

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// progress reports one file's download: a bar redrawn in place on a terminal, else a
// log line per 10%. It is used by one goroutine.
type progress struct {
	w        io.Writer // nil: log lines instead of a bar
	log      *slog.Logger
	name     string
	total    int64 // -1 when unknown
	now      func() time.Time
	interval time.Duration // least time between two redraws of the bar

	start      time.Time
	startBytes int64 // bytes already on disk when this run began (a resumed download)
	done       int64
	lastDraw   time.Time
	lastDecile int64
	lineLen    int
}

const (
	barWidth       = 24
	redrawInterval = 100 * time.Millisecond
)

func newProgress(c *client, name string, total int64) *progress {
	p := &progress{log: c.log, name: name, total: total, now: c.clockNow, interval: redrawInterval}
	if c.terminal && c.progress != nil {
		p.w = c.progress
	}
	return p
}

// begin starts the clock with offset bytes already present.
func (p *progress) begin(offset int64) {
	p.start, p.startBytes, p.done = p.now(), offset, offset
	p.lastDecile = p.decile()
	if p.w != nil {
		p.draw()
		return
	}
	attrs := []any{"file", p.name, "size_mb", mb(p.total)}
	if offset > 0 {
		attrs = append(attrs, "resumed_at_mb", mb(offset))
	}
	p.log.Info("downloading model", attrs...)
}

// restart is called when the download starts over from byte 0 (the server ignored a
// Range request, or the partial file was unusable).
func (p *progress) restart() {
	p.start, p.startBytes, p.done = p.now(), 0, 0
	p.lastDecile = 0
}

func (p *progress) add(n int) {
	p.done += int64(n)
	if p.w != nil {
		if t := p.now(); t.Sub(p.lastDraw) >= p.interval || p.done == p.total {
			p.draw()
		}
		return
	}
	if d := p.decile(); d > p.lastDecile {
		p.lastDecile = d
		p.log.Info("download progress", "file", p.name, "percent", d*10,
			"downloaded_mb", mb(p.done), "size_mb", mb(p.total), "mb_per_s", round1(p.rate()/1e6), "eta", p.eta().String())
	}
}

// end finishes the bar's line, so later output starts on a new one. (The caller logs
// the outcome, with the path.)
func (p *progress) end() {
	if p.w != nil {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

func (p *progress) decile() int64 {
	if p.total <= 0 {
		return 0
	}
	return p.done * 10 / p.total
}

// rate is bytes per second over this run (not counting a resumed prefix).
func (p *progress) rate() float64 {
	el := p.now().Sub(p.start).Seconds()
	if el <= 0 {
		return 0
	}
	return float64(p.done-p.startBytes) / el
}

func (p *progress) eta() time.Duration {
	r := p.rate()
	if r <= 0 || p.total < 0 {
		return 0
	}
	return time.Duration(float64(p.total-p.done) / r * float64(time.Second)).Round(time.Second)
}

// line renders the bar: "NAME  45% [==========>           ] 287.6/639.2 MB  52.1 MB/s  ETA 7s".
func (p *progress) line() string {
	speed := "   -- MB/s"
	if r := p.rate(); r > 0 {
		speed = fmt.Sprintf("%5.1f MB/s", r/1e6)
	}
	if p.total <= 0 {
		return fmt.Sprintf("%s %.1f MB  %s", p.name, mb(p.done), speed)
	}
	pct := p.done * 100 / p.total
	fill := int(p.done * barWidth / p.total)
	bar := strings.Repeat("=", fill)
	if fill < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-fill-1)
	}
	eta := "ETA --"
	if p.done == p.total {
		eta = "done"
	} else if p.rate() > 0 {
		eta = "ETA " + p.eta().String()
	}
	return fmt.Sprintf("%s %3d%% [%s] %.1f/%.1f MB  %s  %s", p.name, pct, bar, mb(p.done), mb(p.total), speed, eta)
}

// draw rewrites the terminal line in place, padding with spaces over the end of a
// longer previous line ('\r' alone does not erase).
func (p *progress) draw() {
	p.lastDraw = p.now()
	l := p.line()
	pad := ""
	if n := p.lineLen - len(l); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.lineLen = len(l)
	fmt.Fprint(p.w, "\r"+l+pad)
}

func mb(n int64) float64 { return round1(float64(n) / 1e6) }

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

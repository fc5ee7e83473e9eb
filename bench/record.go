package bench

// What one contender did on one shape (record), summed into its Result.

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// record accumulates one contender's outcomes on one shape.
type record struct {
	expect    int
	mu        sync.Mutex
	res       Result
	latencies []float64
	tokPerSec []float64
	reqPerSec []float64
	cpu       time.Duration // CPU time of the timed work, where measured
	cpuTokens int           // tokens embedded in it
}

// addCPU records CPU time spent embedding tokens.
func (rc *record) addCPU(d time.Duration, tokens int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.cpu += d
	rc.cpuTokens += tokens
}

func newRecord(s *Shape) *record {
	exp := s.Expect
	if exp == 0 {
		exp = http.StatusOK
	}
	return &record{expect: exp, res: Result{Statuses: map[string]int{}}}
}

// add records one timed outcome of a request of tokens tokens; it reports whether
// the outcome was what a correct server answers.
func (rc *record) add(o Outcome, tokens int) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.res.Requests++
	key := strconv.Itoa(o.Status)
	if o.Status == 0 {
		key = "error"
	}
	rc.res.Statuses[key]++
	rc.latencies = append(rc.latencies, ms(o.Elapsed))
	ok := o.Status == rc.expect && (o.Err == nil || o.Status != http.StatusOK)
	if !ok {
		rc.res.Errors++
		if rc.res.FirstError == "" {
			if o.Err != nil {
				rc.res.FirstError = clip(o.Err.Error(), 300)
			} else {
				rc.res.FirstError = fmt.Sprintf("HTTP %d, expected %d", o.Status, rc.expect)
			}
		}
		return false
	}
	rc.mismatch(o, tokens)
	return true
}

// warmup records an untimed outcome: a failure, or a token count other than the
// one sent, is reported all the same.
func (rc *record) warmup(o Outcome, tokens int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if o.Status != rc.expect {
		rc.res.WarmupErrors++
		return
	}
	rc.mismatch(o, tokens)
}

// mismatch counts a 200 whose reported token count is not the count sent; rc.mu
// is held.
func (rc *record) mismatch(o Outcome, tokens int) {
	if o.Status == http.StatusOK && o.Tokens != 0 && tokens != 0 && o.Tokens != tokens {
		rc.res.TokenMismatches++
		if rc.res.FirstMismatch == "" {
			rc.res.FirstMismatch = fmt.Sprintf("reported %d tokens, %d were sent", o.Tokens, tokens)
		}
	}
}

func (rc *record) finish() *Result {
	rc.res.LatencyMS = Summarize(rc.latencies)
	rc.res.TokensPerSec = Summarize(rc.tokPerSec)
	rc.res.RequestsPerSec = Summarize(rc.reqPerSec)
	if rc.cpu > 0 && rc.cpuTokens > 0 {
		rc.res.CPUSeconds = rc.cpu.Seconds()
		rc.res.TokensPerCPUSec = float64(rc.cpuTokens) / rc.cpu.Seconds()
	}
	return &rc.res
}

// measureCPU runs fn and returns the CPU time clock saw it take (0 without a clock
// or when a reading fails).
func measureCPU(clock func() (time.Duration, error), fn func()) time.Duration {
	if clock == nil {
		fn()
		return 0
	}
	before, err := clock()
	fn()
	after, err2 := clock()
	if err != nil || err2 != nil || after < before {
		return 0
	}
	return after - before
}

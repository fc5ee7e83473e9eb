package telemetrytest

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Samples is one scrape of GET /metrics (the Prometheus text format): its sample
// lines exactly as written, "name{labels} value", without comments and blank lines.
// Tests compare whole lines, so a label that is missing, extra or misspelt fails as
// surely as a wrong value.
type Samples map[string]bool

// ParseSamples reads the sample lines of a Prometheus text exposition.
func ParseSamples(exposition string) Samples {
	s := Samples{}
	for _, l := range strings.Split(exposition, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			s[l] = true
		}
	}
	return s
}

// Require fails the test for each line of want the scrape lacks, and reports
// whether it had them all.
func (s Samples) Require(t testing.TB, want ...string) bool {
	t.Helper()
	ok := true
	for _, l := range want {
		if !s[l] {
			t.Errorf("GET /metrics has no line %s", l)
			ok = false
		}
	}
	return ok
}

// Matching returns the lines that hold substr (a label such as `model=""`), sorted.
func (s Samples) Matching(substr string) []string {
	var out []string
	for l := range s {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// Value returns the value of the series written exactly as series (name and
// labels), or -1 when it is absent or not a number.
func (s Samples) Value(series string) float64 {
	for l := range s {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return -1
			}
			return v
		}
	}
	return -1
}

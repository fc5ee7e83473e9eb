// Package hostmem reads how much memory the host has and how much of it the
// kernel can hand out without swapping, from /proc/meminfo. The ephemeral worker
// admission sizes itself from it, and a worker on the CPU reports it as its
// device memory. It knows nothing of models or workers.
package hostmem

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// Info is the host's memory in bytes.
type Info struct {
	Total     int64 // MemTotal: physical memory
	Available int64 // MemAvailable: what can be allocated without swapping
}

// Read reads /proc/meminfo. ok is false where there is none (macOS) or it lacks
// MemTotal or MemAvailable.
func Read() (Info, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return Info{}, false
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads the MemTotal and MemAvailable lines of a /proc/meminfo text.
func Parse(r io.Reader) (Info, bool) {
	var in Info
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, found := strings.Cut(sc.Text(), ":")
		if !found || key != "MemTotal" && key != "MemAvailable" {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil {
			return Info{}, false
		}
		if key == "MemTotal" {
			in.Total, haveTotal = kb<<10, true
		} else {
			in.Available, haveAvail = kb<<10, true
		}
	}
	return in, haveTotal && haveAvail
}

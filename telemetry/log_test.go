package telemetry

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestJSONLogDurations: JSON logs write durations as Go duration strings, as the
// text format does, not as integers of nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	var buf bytes.Buffer
	logger, err := NewLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("shutting down", "grace", 30*time.Second, "n", 3)
	if got := buf.String(); !strings.Contains(got, `"grace":"30s","n":3}`) {
		t.Errorf("logged %s, want \"grace\":\"30s\"", got)
	}
}

func TestNewLoggerRefuses(t *testing.T) {
	if _, err := NewLogger(nil, "xml", "info"); err == nil || err.Error() != `--log-format "xml": use text or json` {
		t.Errorf("format: %v", err)
	}
	if _, err := NewLogger(nil, "text", "loud"); err == nil || err.Error() != `--log-level "loud": use debug, info, warn or error` {
		t.Errorf("level: %v", err)
	}
}

package telemetry

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/buildinfo"
)

// The build_info gauge carries exactly the labels `embed-stack --version` and GET
// /info report.
func TestBuildInfoGauge(t *testing.T) {
	clearEnv(t)
	tel, err := Setup(context.Background(), Config{Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	info := buildinfo.Get()
	series := fmt.Sprintf(`embed_stack_build_info{commit=%q,goversion=%q,version=%q}`, info.Commit, info.GoVersion, info.Version)
	text := scrape(t, tel)
	if got := text.Value(series); got != 1 {
		t.Fatalf("%s = %v, want 1; build_info lines:\n%s", series, got, strings.Join(text.Matching("embed_stack_build_info"), "\n"))
	}
}

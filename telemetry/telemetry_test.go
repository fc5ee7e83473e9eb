package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/embed-stack/embed-stack/telemetry/telemetrytest"
)

// otelVars are the variables readEnv and Setup look at; clearEnv blanks them so
// that the machine's environment cannot change a test's outcome.
var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
	"OTEL_PROPAGATORS", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "TRACEPARENT", "TRACESTATE", "BAGGAGE",
}

func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
}

func TestReadEnv(t *testing.T) {
	tests := []struct {
		name           string
		env            map[string]string
		wantTraces     []string
		wantProtocol   string
		wantMetrics    bool
		wantMetricProt string
		wantDisabled   bool
		wantErr        string // substring
	}{
		{name: "nothing set: tracing off", wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "endpoint implies otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			wantTraces: []string{"otlp"}, wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "traces endpoint implies otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"},
			wantTraces: []string{"otlp"}, wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "none beats an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "list, spaces, case, duplicates", env: map[string]string{"OTEL_TRACES_EXPORTER": " Console , otlp,console"},
			wantTraces: []string{"console", "otlp"}, wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "logging is console", env: map[string]string{"OTEL_TRACES_EXPORTER": "logging"},
			wantTraces: []string{"console"}, wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "grpc for every signal", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			wantTraces: []string{"otlp"}, wantProtocol: protocolGRPC, wantMetricProt: protocolGRPC},
		{name: "per-signal protocol wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			wantTraces: []string{"otlp"}, wantProtocol: protocolHTTP, wantMetricProt: protocolGRPC},
		{name: "otlp metrics", env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus,otlp"},
			wantMetrics: true, wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "prometheus metrics only", env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"},
			wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, wantDisabled: true},
		{name: "unknown trace exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
			wantErr: `OTEL_TRACES_EXPORTER="zipkin": embed-stack supports otlp, console and none`},
		{name: "console metrics refused", env: map[string]string{"OTEL_METRICS_EXPORTER": "console"},
			wantErr: `OTEL_METRICS_EXPORTER="console": embed-stack supports otlp, prometheus and none`},
		{name: "http/json refused", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
			wantErr: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json"`},
		{name: "unknown propagator", env: map[string]string{"OTEL_PROPAGATORS": "tracecontext,b3"},
			wantErr: `OTEL_PROPAGATORS="tracecontext,b3": embed-stack supports tracecontext, baggage and none`},
		{name: "ratio sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
			wantTraces: []string{"otlp"}, wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "bogus"},
			wantErr: `OTEL_TRACES_SAMPLER="bogus": embed-stack supports always_on, always_off, traceidratio and their parentbased_ forms`},
		{name: "ratio not a number", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "abc"},
			wantErr: `OTEL_TRACES_SAMPLER_ARG="abc": traceidratio takes a ratio from 0 to 1, such as 0.1`},
		{name: "a sampler without tracing is not read", env: map[string]string{"OTEL_TRACES_SAMPLER": "bogus"},
			wantProtocol: protocolHTTP, wantMetricProt: protocolHTTP},
		{name: "endpoint not a URL", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "not-a-url"},
			wantErr: `OTEL_EXPORTER_OTLP_ENDPOINT="not-a-url": an http/protobuf endpoint is a URL, such as http://collector:4318`},
		{name: "grpc endpoint as host:port", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			wantTraces: []string{"otlp"}, wantProtocol: protocolGRPC, wantMetricProt: protocolGRPC},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := readEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.sdkDisabled != tt.wantDisabled {
				t.Errorf("sdkDisabled %v, want %v", c.sdkDisabled, tt.wantDisabled)
			}
			if tt.wantDisabled {
				return
			}
			if !slices.Equal(c.traceExporters, tt.wantTraces) {
				t.Errorf("trace exporters %q, want %q", c.traceExporters, tt.wantTraces)
			}
			if c.traceProtocol != tt.wantProtocol || c.metricProtocol != tt.wantMetricProt {
				t.Errorf("protocols %q/%q, want %q/%q", c.traceProtocol, c.metricProtocol, tt.wantProtocol, tt.wantMetricProt)
			}
			if c.metricsOTLP != tt.wantMetrics {
				t.Errorf("metricsOTLP %v, want %v", c.metricsOTLP, tt.wantMetrics)
			}
		})
	}
}

func TestPropagatorFields(t *testing.T) {
	tests := []struct {
		value string
		want  []string
	}{
		{"", []string{"traceparent", "tracestate", "baggage"}},
		{"tracecontext", []string{"traceparent", "tracestate"}},
		{"baggage", []string{"baggage"}},
		{"none", nil},
	}
	for _, tt := range tests {
		p, err := propagatorFromEnv(tt.value)
		if err != nil {
			t.Fatal(err)
		}
		got := p.Fields()
		slices.Sort(got)
		want := slices.Clone(tt.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("OTEL_PROPAGATORS=%q: fields %q, want %q", tt.value, got, want)
		}
	}
}

// consoleSpan is the part of stdouttrace's JSON the tests read.
type consoleSpan struct {
	Name     string
	Resource []struct {
		Key   string
		Value struct{ Value any }
	}
}

func (s consoleSpan) resource(key string) string {
	for _, kv := range s.Resource {
		if kv.Key == key {
			switch v := kv.Value.Value.(type) {
			case string:
				return v
			case float64:
				return strconv.FormatFloat(v, 'f', -1, 64)
			}
		}
	}
	return ""
}

func TestSetupConsoleExportsSpansWithResource(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantService string
	}{
		{"default service name", nil, DefaultServiceName},
		{"OTEL_SERVICE_NAME wins", map[string]string{"OTEL_SERVICE_NAME": "emb-test"}, "emb-test"},
		{"OTEL_RESOURCE_ATTRIBUTES wins", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,deployment.environment=ci"}, "from-attrs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("OTEL_TRACES_EXPORTER", "console")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			tel, err := Setup(context.Background(), Config{Role: "worker", Version: "v9", Console: &out})
			if err != nil {
				t.Fatal(err)
			}
			if !tel.Tracing() || !tel.Console() {
				t.Fatalf("Tracing %v Console %v, want both", tel.Tracing(), tel.Console())
			}
			_, span := otel.Tracer("t").Start(context.Background(), "console.span")
			if !span.IsRecording() {
				t.Fatal("span from the global tracer does not record")
			}
			span.End()
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got consoleSpan
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("console output is not one span: %v\n%s", err, out.String())
			}
			if got.Name != "console.span" {
				t.Errorf("span name %q", got.Name)
			}
			for key, want := range map[string]string{
				"service.name":           tt.wantService,
				"service.version":        "v9",
				string(RoleKey):          "worker",
				"process.pid":            strconv.Itoa(os.Getpid()),
				"telemetry.sdk.language": "go",
			} {
				if v := got.resource(key); v != want {
					t.Errorf("resource %s = %q, want %q", key, v, want)
				}
			}
		})
	}
}

func TestTracingOffByDefault(t *testing.T) {
	clearEnv(t)
	tel, err := Setup(context.Background(), Config{Role: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if tel.Tracing() || tel.Console() {
		t.Errorf("Tracing %v Console %v with no exporter configured", tel.Tracing(), tel.Console())
	}
	if h := tel.MetricsHandler(); h != nil {
		t.Errorf("MetricsHandler is set without Config.Prometheus")
	}
	// A fresh global tracer is a no-op until a provider is installed; Setup with
	// tracing off must not install one that records.
	if _, span := otel.GetTracerProvider().Tracer("off").Start(context.Background(), "x"); span.IsRecording() {
		t.Error("a span records with tracing off")
	}
	// The propagator is installed all the same, so a caller's trace id still
	// reaches the logs and the workers.
	if f := otel.GetTextMapPropagator().Fields(); !slices.Contains(f, "traceparent") {
		t.Errorf("propagator fields %q, want traceparent among them", f)
	}
}

func TestSetupRefusesBadEnv(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "jaeger")
	if _, err := Setup(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("Setup error %v, want one naming OTEL_TRACES_EXPORTER", err)
	}
}

// scrape returns the sample lines of tel's Prometheus text exposition.
func scrape(t *testing.T, tel *Telemetry) telemetrytest.Samples {
	t.Helper()
	return telemetrytest.ParseSamples(exposition(t, tel))
}

// exposition returns tel's Prometheus text exposition, HELP and TYPE lines included.
func exposition(t *testing.T, tel *Telemetry) string {
	t.Helper()
	h := tel.MetricsHandler()
	if h == nil {
		t.Fatal("no metrics handler")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

func TestMetricsHandlerServesTheGlobalMeter(t *testing.T) {
	clearEnv(t)
	tel, err := Setup(context.Background(), Config{Role: "serve", Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	c, err := otel.Meter("test").Int64Counter("embed_stack.test.things")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	text := scrape(t, tel)
	if v := text.Value("embed_stack_test_things_total"); v != 3 {
		t.Errorf("embed_stack_test_things_total = %v, want 3\n%s", v, strings.Join(text.Matching("embed_stack_"), "\n"))
	}
	c.Add(context.Background(), 2)
	if v := scrape(t, tel).Value("embed_stack_test_things_total"); v != 5 {
		t.Errorf("after 2 more: %v, want 5", v)
	}
	// The Go runtime and process collectors, for the server's own memory.
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if text.Value(name) <= 0 {
			t.Errorf("%s missing or zero", name)
		}
	}
	if len(text.Matching("otel_scope_name")) > 0 || len(text.Matching("target_info")) > 0 {
		t.Errorf("scope labels or target_info exported; they only lengthen every line")
	}
}

// procRSS reads VmRSS independently of rssBytes.
func procRSS(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

func startSleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// workersTelemetry is serve's telemetry with the Prometheus registry, for the
// worker gauges, which read /proc (skipped without it).
func workersTelemetry(t *testing.T) *Telemetry {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	clearEnv(t)
	tel, err := Setup(context.Background(), Config{Role: "serve", Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

func TestObserveWorkers(t *testing.T) {
	tel := workersTelemetry(t)
	warm := startSleeper(t)
	eph1, eph2 := startSleeper(t), startSleeper(t)
	restarts, ready := 4, true
	devOK := true
	if err := tel.ObserveWorkers(Workers{
		Restarts:  func() int { return restarts },
		HangKills: func() int { return 2 },
		WarmPID:   func() int { return warm },
		Ready:     func() bool { return ready },
		Ephemeral: func() (int, int, int) { return 2, 40000, 3 },
		Device: func(context.Context) (DeviceMemory, bool) {
			return DeviceMemory{Name: "CUDA0", Backend: "CUDA", Used: 3 << 30, Total: 141 << 30}, devOK
		},
	}); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, tel)
	for series, want := range map[string]float64{
		"embed_stack_warm_restarts_total":                                      4,
		"embed_stack_warm_hang_kills_total":                                    2,
		"embed_stack_warm_ready":                                               1,
		`embed_stack_workers{role="warm"}`:                                     1,
		`embed_stack_workers{role="ephemeral"}`:                                2,
		"embed_stack_ephemeral_tokens":                                         40000,
		`embed_stack_queue_depth{queue="ephemeral"}`:                           3,
		`embed_stack_device_memory_used_bytes{backend="CUDA",device="CUDA0"}`:  3 << 30,
		`embed_stack_device_memory_total_bytes{backend="CUDA",device="CUDA0"}`: 141 << 30,
	} {
		if v := text.Value(series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
	// RSS of a sleeping process is stable; allow 5% for pages touched meanwhile.
	for series, want := range map[string]float64{
		`embed_stack_worker_rss_bytes{role="warm"}`:      procRSS(t, warm),
		`embed_stack_worker_rss_bytes{role="ephemeral"}`: procRSS(t, eph1) + procRSS(t, eph2),
	} {
		if v := text.Value(series); v < 0.95*want || v > 1.05*want || want <= 0 {
			t.Errorf("%s = %v, want %v ± 5%%", series, v, want)
		}
	}
	restarts, ready, devOK = 5, false, false
	text = scrape(t, tel)
	if lines := text.Matching("embed_stack_device_memory"); len(lines) > 0 {
		t.Errorf("device memory reported while no worker reports a device:\n%s", strings.Join(lines, "\n"))
	}
	if v := text.Value("embed_stack_warm_restarts_total"); v != 5 {
		t.Errorf("restarts after one more: %v, want 5", v)
	}
	if v := text.Value("embed_stack_warm_ready"); v != 0 {
		t.Errorf("ready while not: %v, want 0", v)
	}
}

// TestObserveWorkersSeveralModels: with Models (issue 17) every warm worker
// series carries its model's name, a model stopped by --keep-alive (pid 0) counts
// no warm worker, and the ephemeral workers, which no pid ties to a model, are one
// series without a model label. The lines are compared exactly.
func TestObserveWorkersSeveralModels(t *testing.T) {
	tel := workersTelemetry(t)
	w1, w2 := startSleeper(t), startSleeper(t)
	startSleeper(t) // an ephemeral worker
	w1Ready := true
	if err := tel.ObserveWorkers(Workers{
		Models: []WarmModel{
			{Name: "small", Restarts: func() int { return 1 }, HangKills: func() int { return 0 }, ColdStarts: func() int { return 0 },
				PID: func() int { return w1 }, Ready: func() bool { return w1Ready }, Ephemeral: func() (int, int, int) { return 1, 9000, 2 }},
			{Name: "idle", Restarts: func() int { return 0 }, HangKills: func() int { return 0 }, ColdStarts: func() int { return 3 },
				PID: func() int { return 0 }, Ready: func() bool { return true }, Ephemeral: func() (int, int, int) { return 0, 0, 0 }},
			{Name: "big", Restarts: func() int { return 2 }, HangKills: func() int { return 1 }, ColdStarts: func() int { return 0 },
				PID: func() int { return w2 }, Ready: func() bool { return true }, Ephemeral: func() (int, int, int) { return 0, 0, 0 }},
		},
		WarmPID: func() int { return w1 }, // unused beside Models
		Ready:   func() bool { return false },
	}); err != nil {
		t.Fatal(err)
	}
	lines := func() telemetrytest.Samples {
		out := telemetrytest.Samples{}
		for l := range scrape(t, tel) {
			if strings.HasPrefix(l, "embed_stack_") && !strings.HasPrefix(l, "embed_stack_build_info") {
				// RSS varies: keep the series, not the value.
				if strings.HasPrefix(l, "embed_stack_worker_rss_bytes") {
					l = l[:strings.LastIndexByte(l, ' ')]
				}
				out[l] = true
			}
		}
		return out
	}
	// The HELP text says what the value of a model stopped by --keep-alive ("idle")
	// is: 1, as docs/observability.md says (issue 27: it used to say "else 0").
	if help := "# HELP embed_stack_warm_ready 1 while the model's warm worker takes requests, and while --keep-alive has stopped it (the next request starts it); 0 while it starts or restarts."; !strings.Contains(exposition(t, tel), help+"\n") {
		t.Errorf("/metrics lacks the line %q", help)
	}
	want := []string{
		`embed_stack_warm_restarts_total{model="small"} 1`,
		`embed_stack_warm_restarts_total{model="idle"} 0`,
		`embed_stack_warm_restarts_total{model="big"} 2`,
		`embed_stack_warm_hang_kills_total{model="small"} 0`,
		`embed_stack_warm_hang_kills_total{model="idle"} 0`,
		`embed_stack_warm_hang_kills_total{model="big"} 1`,
		`embed_stack_warm_cold_starts_total{model="small"} 0`,
		`embed_stack_warm_cold_starts_total{model="idle"} 3`,
		`embed_stack_warm_cold_starts_total{model="big"} 0`,
		`embed_stack_warm_ready{model="small"} 1`,
		`embed_stack_warm_ready{model="idle"} 1`,
		`embed_stack_warm_ready{model="big"} 1`,
		`embed_stack_workers{model="small",role="warm"} 1`,
		`embed_stack_workers{model="idle",role="warm"} 0`,
		`embed_stack_workers{model="big",role="warm"} 1`,
		`embed_stack_workers{role="ephemeral"} 1`,
		`embed_stack_worker_rss_bytes{model="small",role="warm"}`,
		`embed_stack_worker_rss_bytes{model="idle",role="warm"}`,
		`embed_stack_worker_rss_bytes{model="big",role="warm"}`,
		`embed_stack_worker_rss_bytes{role="ephemeral"}`,
		`embed_stack_ephemeral_tokens{model="small"} 9000`,
		`embed_stack_ephemeral_tokens{model="idle"} 0`,
		`embed_stack_ephemeral_tokens{model="big"} 0`,
		`embed_stack_queue_depth{model="small",queue="ephemeral"} 2`,
		`embed_stack_queue_depth{model="idle",queue="ephemeral"} 0`,
		`embed_stack_queue_depth{model="big",queue="ephemeral"} 0`,
	}
	got := lines()
	got.Require(t, want...)
	if len(got) != len(want) {
		t.Errorf("%d worker lines, want %d (the single-worker fields must not add series):\n%s", len(got), len(want), strings.Join(got.Matching(""), "\n"))
	}
	text := scrape(t, tel)
	if v := text.Value(`embed_stack_worker_rss_bytes{model="small",role="warm"}`); v < 0.95*procRSS(t, w1) || v > 1.05*procRSS(t, w1) {
		t.Errorf("small's warm RSS %v, want %v ± 5%%", v, procRSS(t, w1))
	}
	if v := text.Value(`embed_stack_worker_rss_bytes{model="idle",role="warm"}`); v != 0 {
		t.Errorf("a stopped model's warm RSS %v, want 0", v)
	}
	w1Ready = false
	if !lines()[`embed_stack_warm_ready{model="small"} 0`] {
		t.Errorf("small not ready, yet its series does not say 0")
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		line      string
		pid, ppid int
		ok        bool
	}{
		{"123 (embed-stack) S 45 123 45 0 -1", 123, 45, true},
		{"7 (a) b) c (d) R 1 7 7 0", 7, 1, true}, // comm with spaces and parentheses
		{"9 () S 2 9", 9, 2, true},
		{"x (a) S 1", 0, 0, false},
		{"5 (a) S", 0, 0, false},
		{"5 a S 1", 0, 0, false},
	}
	for _, tt := range tests {
		pid, ppid, ok := parseStat([]byte(tt.line))
		if pid != tt.pid || ppid != tt.ppid || ok != tt.ok {
			t.Errorf("parseStat(%q) = %d, %d, %v; want %d, %d, %v", tt.line, pid, ppid, ok, tt.pid, tt.ppid, tt.ok)
		}
	}
}

func TestChildPIDs(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	pid := startSleeper(t)
	got, err := childPIDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, pid) {
		t.Errorf("children %v lack the sleeper %d", got, pid)
	}
	if got, _ := childPIDs(pid); len(got) != 0 {
		t.Errorf("sleep has children %v", got)
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	sid, _ := trace.SpanIDFromHex("1112131415161718")
	spanCtx := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	tests := []struct {
		name   string
		ctx    context.Context
		with   func(*slog.Logger) *slog.Logger
		wantID bool
	}{
		{"span in context", spanCtx, nil, true},
		{"no span", context.Background(), nil, false},
		{"after With", spanCtx, func(l *slog.Logger) *slog.Logger { return l.With("k", "v") }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil)))
			if tt.with != nil {
				l = tt.with(l)
			}
			l.InfoContext(tt.ctx, "request", "route", "/v1/embeddings")
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatal(err)
			}
			if tt.wantID {
				if rec["trace_id"] != tid.String() || rec["span_id"] != sid.String() {
					t.Errorf("trace_id %v span_id %v; want %s %s", rec["trace_id"], rec["span_id"], tid, sid)
				}
			} else if _, ok := rec["trace_id"]; ok {
				t.Errorf("trace_id %v without a span", rec["trace_id"])
			}
			if rec["route"] != "/v1/embeddings" {
				t.Errorf("route %v lost", rec["route"])
			}
		})
	}
}

func TestContextFromEnv(t *testing.T) {
	clearEnv(t)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if got := ContextFromEnv(context.Background()); trace.SpanContextFromContext(got).IsValid() {
		t.Fatal("a span context without TRACEPARENT")
	}
	t.Setenv("TRACEPARENT", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	sc := trace.SpanContextFromContext(ContextFromEnv(context.Background()))
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() || !sc.IsSampled() {
		t.Errorf("span context %+v; want the TRACEPARENT's ids, remote and sampled", sc)
	}
	// A malformed value is ignored, as the W3C spec asks of receivers.
	t.Setenv("TRACEPARENT", "00-zz-00f067aa0ba902b7-01")
	if sc := trace.SpanContextFromContext(ContextFromEnv(context.Background())); sc.IsValid() {
		t.Errorf("malformed TRACEPARENT gave %+v", sc)
	}
}

func TestOTLPMetricsPush(t *testing.T) {
	clearEnv(t)
	var mu sync.Mutex
	var names []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req colmetricspb.ExportMetricsServiceRequest
		if r.URL.Path != "/v1/metrics" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					names = append(names, m.GetName())
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&colmetricspb.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	t.Setenv("OTEL_METRICS_EXPORTER", "otlp")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	tel, err := Setup(context.Background(), Config{Role: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Tracing() {
		t.Error("tracing on with OTEL_TRACES_EXPORTER=none")
	}
	c, err := otel.Meter("test").Int64Counter("embed_stack.test.pushed")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 1)
	// Shutdown makes the periodic reader's last export.
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(names, "embed_stack.test.pushed") {
		t.Errorf("the collector got metrics %v, want embed_stack.test.pushed among them", names)
	}
}

func TestSetupGRPC(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	tel, err := Setup(context.Background(), Config{Role: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing() {
		t.Error("tracing off with an OTLP endpoint set")
	}
	// Nothing was recorded, so shutting down sends nothing and returns at once,
	// though nothing listens on the endpoint.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

package telemetry

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// Exporter and protocol names of the OTEL_* variables.
const (
	exporterOTLP    = "otlp"
	exporterConsole = "console"
	exporterNone    = "none"

	protocolHTTP = "http/protobuf"
	protocolGRPC = "grpc"
)

// envConfig is what the OTEL_* variables ask of Setup. The variables that the SDK
// and exporters read themselves (endpoints, headers, sampler, batch sizes, resource
// attributes) are not here.
type envConfig struct {
	sdkDisabled    bool
	traceExporters []string // exporterOTLP and/or exporterConsole; empty = tracing off
	traceProtocol  string
	metricsOTLP    bool
	metricProtocol string
	propagator     propagation.TextMapPropagator
}

// readEnv interprets OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER,
// OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL and OTEL_PROPAGATORS.
func readEnv(getenv func(string) string) (envConfig, error) {
	var c envConfig
	var err error
	if c.propagator, err = propagatorFromEnv(getenv("OTEL_PROPAGATORS")); err != nil {
		return c, err
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		c.sdkDisabled = true
		return c, nil
	}

	traces := getenv("OTEL_TRACES_EXPORTER")
	if strings.TrimSpace(traces) == "" &&
		(getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		// An endpoint is an explicit wish to export; without one, tracing stays off
		// (see the package comment).
		traces = exporterOTLP
	}
	if c.traceExporters, err = exporterList("OTEL_TRACES_EXPORTER", traces, exporterOTLP, exporterConsole); err != nil {
		return c, err
	}
	if c.traceProtocol, err = protocol(getenv, "TRACES"); err != nil {
		return c, err
	}
	if len(c.traceExporters) > 0 {
		if err := checkSampler(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG")); err != nil {
			return c, err
		}
	}
	if c.traceProtocol == protocolHTTP && slices.Contains(c.traceExporters, exporterOTLP) {
		for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if err := checkEndpoint(name, getenv(name)); err != nil {
				return c, err
			}
		}
	}

	// prometheus means the /metrics endpoint, which the --metrics flag rules; only
	// otlp adds something here.
	metrics, err := exporterList("OTEL_METRICS_EXPORTER", getenv("OTEL_METRICS_EXPORTER"), exporterOTLP, "prometheus")
	if err != nil {
		return c, err
	}
	for _, m := range metrics {
		c.metricsOTLP = c.metricsOTLP || m == exporterOTLP
	}
	if c.metricProtocol, err = protocol(getenv, "METRICS"); err != nil {
		return c, err
	}
	return c, nil
}

// exporterList parses a comma-separated exporter list. "none" anywhere, or an empty
// value, gives an empty list.
func exporterList(name, value string, allowed ...string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(value, ",") {
		v = strings.ToLower(strings.TrimSpace(v))
		switch {
		case v == "":
			continue
		case v == exporterNone:
			return nil, nil
		case v == "logging" && slices.Contains(allowed, exporterConsole):
			v = exporterConsole // the specification's former name for console
		case !slices.Contains(allowed, v):
			return nil, fmt.Errorf("%s=%q: embed-stack supports %s and none", name, value, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// protocol reads OTEL_EXPORTER_OTLP_<signal>_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL;
// the default is http/protobuf, as the specification says.
func protocol(getenv func(string) string, signal string) (string, error) {
	name := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		v = strings.TrimSpace(getenv(name))
	}
	switch strings.ToLower(v) {
	case "", protocolHTTP:
		return protocolHTTP, nil
	case protocolGRPC:
		return protocolGRPC, nil
	}
	return "", fmt.Errorf("%s=%q: embed-stack's OTLP exporters speak http/protobuf and grpc (the Go SDK has no http/json)", name, v)
}

// checkEndpoint refuses an http/protobuf endpoint that is not an http(s) URL: the
// exporter would fail every export, a warning each, for the server's life.
func checkEndpoint(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	u, err := url.Parse(strings.TrimSpace(v))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s=%q: an http/protobuf endpoint is a URL, such as http://collector:4318", name, v)
	}
	return nil
}

// checkSampler refuses an OTEL_TRACES_SAMPLER the Go SDK does not know, and a
// ratio outside [0, 1]: the SDK would log an error and sample every trace, which
// is not what an operator who asked for 10 % meant.
func checkSampler(sampler, arg string) error {
	name := strings.ToLower(strings.TrimSpace(sampler))
	switch name {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return nil
	case "traceidratio", "parentbased_traceidratio":
		if strings.TrimSpace(arg) == "" {
			return nil // the SDK's default ratio, 1
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if err != nil || r < 0 || r > 1 {
			return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: %s takes a ratio from 0 to 1, such as 0.1", arg, name)
		}
		return nil
	}
	return fmt.Errorf("OTEL_TRACES_SAMPLER=%q: embed-stack supports always_on, always_off, traceidratio and their parentbased_ forms", sampler)
}

// propagatorFromEnv builds the OTEL_PROPAGATORS list; the default is tracecontext
// and baggage.
func propagatorFromEnv(value string) (propagation.TextMapPropagator, error) {
	if strings.TrimSpace(value) == "" {
		value = "tracecontext,baggage"
	}
	var ps []propagation.TextMapPropagator
	for _, v := range strings.Split(value, ",") {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "":
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "none":
			return propagation.NewCompositeTextMapPropagator(), nil
		default:
			return nil, fmt.Errorf("OTEL_PROPAGATORS=%q: embed-stack supports tracecontext, baggage and none", value)
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), nil
}

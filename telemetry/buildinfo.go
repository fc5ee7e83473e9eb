package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/embed-stack/embed-stack/internal/buildinfo"
)

// buildInfoCollector is the gauge embed_stack_build_info{version, commit,
// goversion} = 1, the Prometheus convention for joining a build's identity onto
// other series (`* on() group_left(version) embed_stack_build_info`). Its labels
// come from package buildinfo, as `embed-stack --version` and GET /info do.
func buildInfoCollector() prometheus.Collector {
	info := buildinfo.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "embed_stack_build_info",
		Help: "A metric with a constant '1' value labelled by the version, commit and Go version of the embed-stack build.",
		ConstLabels: prometheus.Labels{
			"version":   info.Version,
			"commit":    info.Commit,
			"goversion": info.GoVersion,
		},
	})
	g.Set(1)
	return g
}

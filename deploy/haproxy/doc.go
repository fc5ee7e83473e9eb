// Package haproxy holds the HAProxy configuration that puts embed-stack replicas
// behind one address (haproxy.cfg, explained in README.md) and its test: three real
// `embed-stack serve` replicas on the test model behind a real HAProxy on loopback,
// under a minute of load, with one replica restarted gracefully (SIGTERM) and another
// killed (SIGKILL) and restarted, every answer checked against the vectors of a solo
// run.
//
// It has no code: it refuses to know anything but the configuration file and what
// the replicas show through their public HTTP surface.
//
// Environment (besides internal/e2e's EMBED_STACK_BIN, EMBED_STACK_MODEL and
// EMBED_STACK_REQUIRE_E2E, which also turns a missing haproxy into a failure):
//
//	EMBED_STACK_SCALE_DURATION  length of the load (default 60s)
//	EMBED_STACK_SCALE_CLIENTS   concurrent clients (default 6)
package haproxy

// Package bench measures OpenAI-compatible embedding servers against each other and
// against the engine floor, in one run, so that the ratios hold on a noisy machine.
//
// A run is a list of targets and a list of shapes. A target is anything that embeds
// inputs: a server behind a base URL (Server, spoken to over POST /v1/embeddings)
// or the in-process engine (Floor, fed the same token ids with no HTTP and no worker
// hop). A shape is a workload: one request of some inputs sent again and again, N
// clients sending single short queries for a fixed time, or short queries while a
// long input is in flight, or a re-index of a corpus most of which was embedded
// before (reindex.go: a priming pass, one timed pass, and the vectors compared bit
// for bit with those of embed-stack without its cache). Every input is real text
// from the repository's public-domain corpus cut to an exact token count (Corpus),
// so every target does the same work.
//
// Before any target is timed, Check compares its vectors with the floor's for the
// same wrapped text (cosine): a peer that computes something else (another pooling,
// no end-of-text token, a truncated input) is reported and never timed. Repetitions
// of a shape are interleaved across targets, so a load spike on the shared machine
// hits every target alike. Tree samples the resident memory of a server's whole
// process tree from /proc. The report is a table and JSON; Goals reads the issue's
// targets off a report.
//
// Session is a whole run as `embed-stack bench` sets it up: it starts the servers
// through bench/peers (which knows how each one is started), opens the floor
// through a function it is given, and stops them all at the end. The package knows
// nothing of llama.cpp (the floor is any Embedder) or of the embed-stack server's
// internals: it speaks HTTP and the OpenAI wire format only. It builds and tests
// without cgo.
package bench

// Package worker is the conformance suite of the worker protocol (docs/architecture.md,
// "Worker protocol"): black-box tests of any program that serves GET /health and POST
// /embed on a Unix socket, started the way `embed-stack serve` starts its workers. The
// same tests pin down the Go llama.cpp worker (`embed-stack worker`, in `make test`) and
// the Swift/MLX one (mlx-embed-server, `make conformance-mlx` on a Mac).
//
// It refuses to know how a worker is built: it imports no package of the server, only
// the float64 reference forward pass (internal/reference) as numerical ground truth. A
// worker is a command line; the suite appends "--socket PATH" (in a private 0700
// directory), starts it with stdin a pipe the suite holds, and talks HTTP/1.1 over the
// socket. The package has no non-test code; this file exists for its documentation.
//
// What is checked, with exact values:
//   - /health: 503 {"status":"loading","pid":P} (Retry-After: 1) while loading, if seen,
//     then 200 with exactly status "ready", n_embd, max_tokens, max_batch_tokens, model
//     and pid, the pid being the process the suite started, and optionally device (name,
//     backend and memory: where the worker computes);
//   - /embed: one vector of n_embd finite floats per sequence, in input order; the same
//     request twice gives bit-identical vectors; a sequence alone and inside a batch of
//     mixed lengths agree to cosine ≥ 0.99999; with a reference GGUF, every vector
//     agrees with the float64 reference to cosine ≥ WORKER_COSINE_MIN; a sequence of
//     exactly max_tokens is accepted;
//   - the refusals, status and whole body: an empty list, a missing "tokens", an empty
//     sequence, one of max_tokens+1, a negative and an out-of-vocabulary id (400 with
//     "index"), a body that is not JSON, unknown paths (404) and wrong methods (405
//     with Allow); a worker still serves after each;
//   - a W3C traceparent header is accepted and changes nothing;
//   - lifecycle: EOF on stdin and SIGTERM each stop the worker with status 0 within
//     10 s, and the socket file is gone afterwards.
//
// With WORKER_CMD_B, a second worker is started beside the first and the two must give
// vectors agreeing to cosine ≥ WORKER_COSINE_MIN for the same tokens, at lengths on
// both sides of 256, 1024 and 8192 (the MLX worker's buckets) up to the smaller
// max_tokens. This is how the MLX worker is compared with llama.cpp (`make
// conformance-mlx`, on a Mac; CI never builds the Swift package).
//
// One test is about serve rather than a worker: `embed-stack serve --warm-backend mlx`
// starts --mlx-server as its warm worker with --model pointing at --mlx-model. No MLX
// worker runs on Linux, so a stand-in script that records its arguments and execs
// `embed-stack worker` plays it; that test needs bin/embed-stack and models/tiny.gguf
// whatever WORKER_CMD is.
//
// Environment:
//
//	WORKER_CMD            the worker command line, split like a POSIX shell would (quotes,
//	                      backslashes; no expansions) and run from the repository root
//	                      (default "bin/embed-stack worker --model models/tiny.gguf")
//	WORKER_CMD_B          a second worker to compare with (default: none)
//	REFERENCE_GGUF        GGUF for the float64 reference; when the variable is unset it
//	                      defaults to models/tiny.gguf if WORKER_CMD is the default, and
//	                      to none otherwise; set it empty to skip the reference. The
//	                      reference is float64 on the CPU: the 0.6B model takes minutes.
//	WORKER_COSINE_MIN     least cosine against the reference and between two workers
//	                      (default 0.9999, which the Go worker meets; 0.999 for MLX F16
//	                      against llama.cpp F16)
//	WORKER_VOCAB          vocabulary size, for the out-of-vocabulary refusal (default: the
//	                      reference GGUF's, else 151669, Qwen3's)
//	WORKER_MODEL_NAME     the "model" /health must report (default: the general.name of
//	                      models/tiny.gguf when WORKER_CMD is the default, otherwise any
//	                      non-empty name)
//	WORKER_READY_TIMEOUT  how long a worker may take to say ready, a Go duration
//	                      (default 2m; MLX warms three buckets first)
//	EMBED_STACK_REQUIRE_E2E  "1" turns a missing default binary or model into a failure
//	                      instead of a skip
package worker

// Package backends owns the worker protocol and the worker processes behind it.
//
// A worker is an `embed-stack worker` process (or any program speaking the same
// protocol, such as the Swift/MLX server) that holds a model and turns token-id
// sequences into raw pooled vectors. It serves HTTP/1.1 + JSON on a Unix socket in a
// private directory:
//
//	GET  /health  200 {"status":"ready","n_embd":1024,"max_tokens":8192,"max_batch_tokens":8192,"model":"...","pid":123}
//	              (optionally "short_jobs":{"max_tokens":128,"batch_tokens":512,"max_seqs":64}: see [ShortJobs])
//	              503 {"status":"loading","pid":123}
//	POST /embed   {"tokens":[[151643],[1,2,3,151643]]} → 200 {"embeddings":[[...],[...]]}
//	              400 {"error":"...","index":1} bad input, 503 loading, 500 engine failure
//
// The package has both sides of that protocol:
//
//   - worker side: [NewWorkerHandler] serves an [Engine]; [RunWorker] runs the whole
//     worker process (socket, signals, stdin EOF, loading state, graceful drain);
//   - server side: [Client] speaks the protocol; [Warm] supervises the long-lived
//     worker (readiness, restarts with backoff); [Ephemeral] runs one short-lived worker
//     per long sequence with a context sized to it.
//   - between them, the worker's command line: [WorkerArgs], which the server side
//     writes (Args) and the worker reads (Parse).
//
// Errors that callers map to HTTP statuses: errors.Is(err, [ErrUnavailable]) (503,
// with [UnavailableError.RetryAfter]), *[WorkerInputError] (400); anything else is an
// internal failure (500).
//
// backends refuses to know about OpenAI request shapes, routing policy (which
// sequence goes to which worker, limits shown to users, normalisation) and llama.cpp:
// the engine is an interface here and the cgo adapter lives in backends/llama, which
// this package never imports, so it builds and tests with CGO_ENABLED=0.
package backends

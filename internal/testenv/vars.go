package testenv

// vars is the index. Keep it grouped as docs/testing.md shows it: what make test
// sets, what selects a suite's subject, benchmarks, measurements, and last the
// switches of helper processes, which no person sets.
var vars = []Var{
	// The suite as make test runs it.
	{"EMBED_STACK_REQUIRE_E2E", "make test", `"1": a test that lacks the binary, a model or a tool fails instead of skipping`, "every end-to-end test"},
	{"EMBED_STACK_BIN", "you", "the binary the end-to-end tests run (default bin/embed-stack, from make build)", "internal/e2e, backends"},
	{"EMBED_STACK_MODEL", "you", "the GGUF they serve (default models/tiny.gguf, from make models)", "internal/e2e, backends"},
	{"EMBED_STACK_PYTHON", "make test-go", "a Python with pyarrow, which reads the batch job's Parquet output; unset, that test skips", "cmd/embed-stack"},
	{"EMBED_STACK_CHROMA_VENV", "make test-go", "a virtual environment with chromadb (.cache/venv-integrations): its chroma serves the batch job's chroma:// output, its Python reads the collection back; unset, those tests skip", "cmd/embed-stack"},
	{"EMBED_STACK_CACHE_SOAK", "make soak-cache", "how long TestCacheBoundedDistinct sends distinct inputs through the cache at least, a Go duration (it also runs until the cache has been filled and replaced twice over, all it does by default)", "conformance"},
	{"EMBED_STACK_CACHE_SOAK_MIB", "make soak-cache", "the --cache-size of that soak in MiB (default 1)", "conformance"},
	{"EMBED_STACK_COHERE_PYTHON", "make test-cohere", "the Python of the Cohere SDK's virtual environment; unset, TestCohereClient skips", "conformance"},
	{"EMBED_STACK_SCHEMATHESIS", "make test-openapi", "the schemathesis executable; unset, TestOpenAPIFuzz skips", "conformance"},
	{"EMBED_STACK_CHROMIUM", "you", "the browser for the /docs page test (default chromium on the PATH)", "conformance"},
	{"EMBED_STACK_DIST", "make test-dist", "the release archive make dist wrote; unset, TestDistArchive skips", "deploy"},
	{"EMBED_STACK_LINK_TEST", "you", `"1": link the binary for an AMX CPU and compile every CPU kernel variant even without EMBED_STACK_REQUIRE_E2E (compiles llama.cpp once more)`, "deploy"},
	{"EMBED_STACK_CPU_VARIANT_DIR", "you", "the folder of CPU kernel variant libraries the variant tests load (default lib/embed-stack, from make cpu-variant-test)", "cmd/embed-stack"},
	{"EMBED_STACK_AMX", "you", "off or 0 keeps embed-stack's BF16 products out of AMX tiles (the product's own switch, docs/configuration.md); the tests that check what /health and `devices` say of the kernels read it, as the description names AMX only where the tiles are on", "backends/llama, cmd/embed-stack"},
	{"EMBED_STACK_TEST_CPU_VARIANT", "you", "a CPU kernel variant the engine tests load before any engine opens (e.g. haswell); unset, they run on the compiled-in kernels", "backends/llama"},
	{"EMBED_STACK_TEST_BACKEND_DIR", "you", "the folder holding that variant's library (e.g. lib/embed-stack)", "backends/llama"},
	{"EMBED_STACK_SOAK", "you", "how long the soak test runs, a Go duration (default 60s)", "conformance"},
	{"EMBED_STACK_SCALE_DURATION", "you", "how long the load behind HAProxy lasts (default 60s)", "deploy/haproxy"},
	{"EMBED_STACK_SCALE_CLIENTS", "you", "its concurrent clients (default 6)", "deploy/haproxy"},

	// The worker-protocol suite's subject (conformance/worker/doc.go).
	{"WORKER_CMD", "make conformance-mlx", "the worker command line under test (default bin/embed-stack worker --model models/tiny.gguf)", "conformance/worker"},
	{"WORKER_CMD_B", "make conformance-mlx", "a second worker whose vectors must agree with the first (default none)", "conformance/worker"},
	{"REFERENCE_GGUF", "you", `the GGUF of the float64 reference ("" for none; default models/tiny.gguf for the default worker)`, "conformance/worker"},
	{"WORKER_COSINE_MIN", "make conformance-mlx", "least cosine against the reference and between two workers (default 0.9999)", "conformance/worker"},
	{"WORKER_VOCAB", "you", "vocabulary size, for the out-of-vocabulary refusal (default: the reference GGUF's)", "conformance/worker"},
	{"WORKER_MODEL_NAME", "you", `the "model" GET /health must report (default: the default model's general.name)`, "conformance/worker"},
	{"WORKER_READY_TIMEOUT", "make conformance-mlx", "how long a worker may take to be ready (default 2m)", "conformance/worker"},

	// Benchmarks (go test -bench; make bench is the product's own harness).
	{"EMBED_STACK_BENCH_MODEL", "you", "the GGUF of the engine's benchmarks and measurements (default models/tiny.gguf; make bench-model writes the 0.6B shape)", "backends/llama"},
	{"EMBED_STACK_BENCH_BATCH", "you", "the engine's BatchTokens there", "backends/llama"},
	{"EMBED_STACK_BENCH_THREADS", "you", "the engine's Threads there", "backends/llama"},
	{"EMBED_STACK_BENCH_TELEMETRY", "you", "what BenchmarkEmbeddingsRequest records: metrics, tracing, or nothing", "server"},

	// Measurements: tests that print figures for docs/ and run only when asked.
	{"EMBED_STACK_MEASURE", "you", "backends/llama: workloads NxLEN, comma-separated, for TestMeasure; cmd/embed-stack: the lines TestEmbedMeasure embeds", "backends/llama, cmd/embed-stack"},
	{"EMBED_STACK_MEASURE_RUNS", "you", "best of how many runs (default 2)", "backends/llama"},
	{"EMBED_STACK_MEASURE_POOL", "you", "who pools an encoder's sequences: engine (default) or graph (llama.cpp's pooling, 31 sequences a call)", "backends/llama"},
	{"EMBED_STACK_MEASURE_SEQS", "you", "sequences per decode call in the measurements", "backends/llama"},
	{"EMBED_STACK_MEASURE_PACK", "you", "an encoder's longest sequence packed with flash attention in the measurements (0: none; unset: llama.EncoderPackMaxTokens)", "backends/llama"},
	{"EMBED_STACK_MEASURE_FA", "you", "queries of one flash-attention call TestMeasureFlashAttention times (embed-stack's kernel, AVX512_BF16 only)", "backends/llama"},
	{"EMBED_STACK_MEASURE_FA_CELLS", "you", "cells those queries attend over (4096 by default)", "backends/llama"},
	{"EMBED_STACK_MEASURE_ATTN", "you", "the attention kernel: hybrid (default), plain, flash, flash-bf16v or flash-bf16 (embed-stack's kernel, AVX512_BF16 only); a list for TestMeasurePrecision", "backends/llama"},
	{"EMBED_STACK_MEASURE_CTX", "you", "the engine's ContextTokens in the measurements", "backends/llama"},
	{"EMBED_STACK_MEASURE_MIX", "you", "the mixed workload, NxLEN terms joined by +", "backends/llama"},
	{"EMBED_STACK_MEASURE_BUCKETS", "you", "context buckets (default 256,1024,8192)", "backends/llama"},
	{"EMBED_STACK_MEASURE_WARMUP", "you", "input lengths whose first and second decode are timed", "backends/llama"},
	{"EMBED_STACK_MEASURE_IDLE", "you", "pauses in milliseconds before each short sequence TestMeasureIdle times", "backends/llama"},
	{"EMBED_STACK_MEASURE_LEN", "you", "that sequence's tokens (default 17)", "backends/llama"},
	{"EMBED_STACK_MEASURE_PRECISION", "you", "input lengths whose cosine to the reference is measured per kernel", "backends/llama"},
	{"EMBED_STACK_MEASURE_SPAWN", "you", "token counts whose ephemeral worker is timed from spawn to exit", "backends"},
	{"EMBED_STACK_MEASURE_MODEL", "you", "another GGUF for TestEmbedMeasure", "cmd/embed-stack"},
	{"EMBED_STACK_MEASURE_ARGS", "you", "extra embed flags for TestEmbedMeasure, space-separated", "cmd/embed-stack"},
	{"EMBED_STACK_MEASURE_SHORT_MODEL", "you", "the model of the short-query server in TestMeasureShortLatency", "conformance"},
	{"EMBED_STACK_MEASURE_LONG", "you", "the tokens of the long input beside it", "conformance"},
	{"EMBED_STACK_MEASURE_LONG_FLAGS", "you", "serve flags of the long input's server, space-separated", "conformance"},
	{"EMBED_STACK_MEASURE_TRACING", "you", "requests per server in TestTracingOverhead, which runs only when it is set", "conformance"},
	{"EMBED_STACK_MEASURE_BASE_BIN", "you", "an uninstrumented embed-stack to compare with there", "conformance"},

	// Helper processes: the test binary re-executed as a fake child. A test sets these
	// for its child; the child reads them.
	{"BACKENDS_FAKE_WORKER", "a test, for its fake", `"1": the test binary runs as a fake worker (RunWorker with a fake engine)`, "backends"},
	{"FAKE_RECORD_DIR", "a test, for its fake", "the fake worker writes its command line to DIR/PID.args", "backends"},
	{"FAKE_CRASH_AT_START", "a test, for its fake", "the fake worker prints this and exits 3 before listening", "backends"},
	{"FAKE_CRASH_AT_START_IF", "a test, for its fake", "... but only while this path exists", "backends"},
	{"FAKE_LOAD_FAIL", "a test, for its fake", "the fake load fails with this message", "backends"},
	{"FAKE_LOAD_DELAY", "a test, for its fake", "the fake load takes this long", "backends"},
	{"FAKE_LOAD_PROGRESS", "a test, for its fake", `"1": the fake load prints a line every 20ms`, "backends"},
	{"FAKE_NEVER_READY", "a test, for its fake", `"1": the fake load never returns`, "backends"},
	{"FAKE_WEDGE_ON_EXIT", "a test, for its fake", `"1": the fake never exits after RunWorker returns (only SIGKILL ends it)`, "backends"},
	{"FAKE_CRASH_ONCE_FILE", "a test, for its fake", "the crash token aborts the fake only while this file does not exist (it creates it)", "backends"},
	{"FAKE_SLOW_RESTART", "a test, for its fake", "the fake load takes this long once FAKE_CRASH_ONCE_FILE exists", "backends"},
	{"PEERS_FAKE", "a test, for its fake", `"1": the test binary plays embed-stack, ollama or their child`, "bench/peers"},
	{"PEERS_FAKE_EXIT", "a test, for its fake", `"1": the fake server refuses to start`, "bench/peers"},
	{"PEERS_CHILD_PID", "a test, for its fake", "the file where a fake server writes its child's pid", "bench/peers"},
	// Read by the fake ollama as ollama reads them: the code under test sets them.
	{"OLLAMA_HOST", "bench/peers, for ollama", "the address the fake ollama listens on", "bench/peers"},
	{"OLLAMA_MODELS", "bench/peers, for ollama", "where the fake ollama keeps the models ollama create made", "bench/peers"},
	{"HOME", "bench/peers, for ollama", "where the fake ollama writes the environment it was started with", "bench/peers"},
}

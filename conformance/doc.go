// Package conformance holds black-box tests of the real embed-stack binary: they start
// `embed-stack serve` on a loopback port with the generated test model and talk to it only
// through public surfaces (the go-openai client, plain net/http, and the node SDKs under
// node/), comparing every vector against the float64 reference forward pass.
//
// It refuses to know anything about the server's internals: no package of the server is
// imported, only the tokenizer and the numerical reference that the tests use as ground
// truth. The package has no non-test code; this file exists for its documentation.
//
// Environment:
//
//	EMBED_STACK_BIN          the binary (default <repo>/bin/embed-stack, built by `make build`)
//	EMBED_STACK_MODEL        the GGUF (default <repo>/models/tiny.gguf, written by `make models`)
//	EMBED_STACK_REQUIRE_E2E  "1" turns a missing binary or model into a failure instead of a skip
package conformance

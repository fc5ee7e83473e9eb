//go:build !cgo

package cgoflags

// With cgo off, backends/llama has no engine: its cgo-free files alone fail with a
// screen of "undefined" errors. This one error names the fix instead.
const _ = backends_llama_needs_cgo__run_eval_make_s_cgo_env__it_sets_CGO_ENABLED_1

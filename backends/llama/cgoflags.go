package llama

// A build without the Makefile's cgo flags stops at once, with a message that names
// eval "$(make -s cgo-env)", instead of a compiler error from llama.cpp minutes later
// (internal/cgoflags says why the check is a package of its own).
import _ "github.com/embed-stack/embed-stack/backends/llama/internal/cgoflags"

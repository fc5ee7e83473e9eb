// Package cgoflags stops a cgo build of backends/llama that lacks the Makefile's flags
// with a message that says how to get them, instead of a compiler error from deep inside
// llama.cpp minutes later.
//
// The headers that backends/llama and the ollama module's llama.cpp need are found
// only through CGO_CPPFLAGS, which the Makefile sets (docs/building.md): llama.h and
// ggml-backend.h in the Go module cache, the stand-in miniaudio.h of
// backends/llama/include, and the Debian packages that `make deps` installs. A plain
// `go build ./...` or `go test ./...` has none of them.
//
// Why a package of its own: go compiles a package's cgo preamble only after all of its
// imports are built, so a check in backends/llama itself would wait for the whole of
// llama.cpp, whose own build fails first (no stand-in header). This package imports
// nothing, so go builds it at once, beside llama.cpp, and its message is the first
// error printed (go still finishes the packages it has started; their errors follow).
//
// It holds no code: backends/llama remains the one package that calls C. It refuses to
// know anything but the names of those headers.
package cgoflags

/*
#if !__has_include("llama.h") || !__has_include("ggml-backend.h")
#error llama.h is not on the include path: backends/llama needs the cgo flags of the Makefile. Run eval "$(make -s cgo-env)" in this shell, then go build or go test again (or make build; see docs/building.md).
#elif !__has_include("miniaudio/miniaudio.h")
#error the stand-in miniaudio.h of backends/llama/include is not on the include path: backends/llama needs the cgo flags of the Makefile. Run eval "$(make -s cgo-env)" in this shell, then go build or go test again (or make build; see docs/building.md).
#elif !__has_include(<nlohmann/json_fwd.hpp>) || !__has_include(<stb/stb_image.h>)
#error nlohmann/json_fwd.hpp or stb/stb_image.h is missing: run make deps (Debian: nlohmann-json3-dev libstb-dev; macOS: docs/building.md), then eval "$(make -s cgo-env)" again.
#endif
*/
import "C"

// Command ollama is Ollama v0.17.4's own command line, built from the Go module
// cache as a benchmark peer for embed-stack (see bench/peers/README.md).
//
// It is a separate module so that Ollama's full dependency set never enters
// embed-stack's go.mod; its ggml CPU backend is compiled through cgo with the same
// flags as embed-stack's (the Makefile's `cgo-env`), so both run the same kernels.
package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/ollama/ollama/cmd"
)

func main() {
	cobra.CheckErr(cmd.NewCLI().ExecuteContext(context.Background()))
}

package backends

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Values of --warm-backend: which program is the warm worker.
const (
	// WarmLlama is `embed-stack worker`, llama.cpp on the GGUF (the default).
	WarmLlama = "llama"
	// WarmMLX is mlx-embed-server (mlx-embed-server/ in this repository), MLX on the
	// GPU of an Apple Silicon Mac, reading the Hugging Face safetensors snapshot.
	WarmMLX = "mlx"
)

// MLXPlatform is where mlx-embed-server runs: MLX needs Metal on Apple Silicon.
const MLXPlatform = "darwin/arm64"

// mlxServerName is the file name of the MLX worker; without --mlx-server it is looked
// for next to the embed-stack executable (an installation puts both in one bin/).
const mlxServerName = "mlx-embed-server"

// WarmProgram says which program serves as the warm worker (serve's --warm-backend,
// --mlx-server and --mlx-model). Only the warm worker changes: the tokenizer,
// routing and the ephemeral workers for inputs longer than --warm-max-tokens stay
// llama.cpp on the GGUF, whatever the backend.
type WarmProgram struct {
	// Name is WarmLlama or WarmMLX; "" means WarmLlama.
	Name string
	// MLXServer is the mlx-embed-server executable; "" means mlxServerName next to
	// the embed-stack executable, and only on MLXPlatform.
	MLXServer string
	// MLXModel is the snapshot directory (config.json and *.safetensors) the MLX
	// worker loads instead of the GGUF.
	MLXModel string
}

// Resolve checks the choice at start, before any model is downloaded or worker
// started, and returns it with absolute paths. platform is GOOS/GOARCH; exe is the
// embed-stack executable.
//
// The platform rule: without --mlx-server, mlx is refused outside darwin/arm64, where
// no mlx-embed-server can run. An explicit --mlx-server is accepted on any platform:
// it names a program the user vouches for, and any program that speaks the worker
// protocol will do (the conformance suite, conformance/worker, is what vouches for
// one).
func (b WarmProgram) Resolve(platform, exe string) (WarmProgram, error) {
	switch b.Name {
	case "", WarmLlama:
		if b.MLXServer != "" || b.MLXModel != "" {
			return b, errors.New("--mlx-server and --mlx-model apply only with --warm-backend mlx; add it, or drop them")
		}
		b.Name = WarmLlama
		return b, nil
	case WarmMLX:
	default:
		return b, fmt.Errorf("--warm-backend %q: want %s (llama.cpp on the GGUF) or %s (mlx-embed-server on Apple Silicon)", b.Name, WarmLlama, WarmMLX)
	}

	if b.MLXModel == "" {
		return b, errors.New("--warm-backend mlx needs --mlx-model DIR: the Hugging Face snapshot directory (config.json and *.safetensors) of the model --model is the GGUF of")
	}
	dir, err := filepath.Abs(b.MLXModel)
	if err != nil {
		return b, fmt.Errorf("--mlx-model: %w", err)
	}
	if st, err := os.Stat(dir); err != nil {
		return b, fmt.Errorf("--mlx-model: %w", err)
	} else if !st.IsDir() {
		return b, fmt.Errorf("--mlx-model %s is not a directory; give the Hugging Face snapshot directory (config.json and *.safetensors), not a file", b.MLXModel)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return b, fmt.Errorf("--mlx-model %s holds no config.json; give the Hugging Face snapshot directory of the model (mlx-embed-server/README.md shows how to download it)", b.MLXModel)
	}
	b.MLXModel = dir

	server := b.MLXServer
	if server == "" {
		if platform != MLXPlatform {
			return b, fmt.Errorf("--warm-backend mlx runs %s, which needs macOS on Apple Silicon (%s), and this is %s; use --warm-backend llama, or name a worker built for this machine with --mlx-server PATH", mlxServerName, MLXPlatform, platform)
		}
		server = filepath.Join(filepath.Dir(exe), mlxServerName)
		if _, err := os.Stat(server); errors.Is(err, fs.ErrNotExist) {
			return b, fmt.Errorf("--warm-backend mlx: no %s next to %s; build it (mlx-embed-server/README.md) and give its path with --mlx-server PATH", mlxServerName, exe)
		}
	} else if !strings.ContainsRune(server, filepath.Separator) {
		// A bare name is looked up in PATH, as a shell would.
		p, err := exec.LookPath(server)
		if err != nil {
			return b, fmt.Errorf("--mlx-server %s: %w", server, err)
		}
		server = p
	}
	if server, err = filepath.Abs(server); err != nil {
		return b, fmt.Errorf("--mlx-server: %w", err)
	}
	st, err := os.Stat(server)
	switch {
	case err != nil:
		return b, fmt.Errorf("--mlx-server: %w", err)
	case !st.Mode().IsRegular():
		return b, fmt.Errorf("--mlx-server %s is not a file; give the mlx-embed-server executable (with xcodebuild: .xcodebuild/Build/Products/Release/mlx-embed-server)", server)
	case st.Mode().Perm()&0o111 == 0:
		return b, fmt.Errorf("--mlx-server %s is not executable; chmod +x it or give the built binary", server)
	}
	b.MLXServer = server
	return b, nil
}

// Spec returns the warm worker's command, given the one serve builds for the
// llama.cpp worker (`embed-stack worker` with args). For mlx it runs MLXServer with
// the same worker arguments but --model MLXModel in place of the GGUF and no device
// flags (they choose a ggml device; MLX always runs on the Mac's GPU) nor
// --release-kv (llama.cpp's KV cache).
// mlx-embed-server honours --ctx (its largest bucket) and accepts the llama.cpp-only
// flags (--threads, --batch, ...) with a warning, so both workers take one argument
// list. b must have come from Resolve.
func (b WarmProgram) Spec(args WorkerArgs, llama WorkerSpec) WorkerSpec {
	if b.Name != WarmMLX {
		return llama
	}
	args.Model, args.DeviceArgs, args.ReleaseKV = b.MLXModel, DeviceArgs{}, 0
	out := llama
	out.Path, out.Args = b.MLXServer, args.Args()
	return out
}

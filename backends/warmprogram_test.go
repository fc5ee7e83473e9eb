package backends

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// mlxFixture lays out what --warm-backend mlx needs on disk: an executable, a
// snapshot directory with config.json, and an embed-stack "executable" directory.
type mlxFixture struct {
	dir, server, snapshot, exe, noConfig, notExec string
}

func newMLXFixture(t *testing.T) mlxFixture {
	t.Helper()
	d := t.TempDir()
	f := mlxFixture{
		dir:      d,
		server:   filepath.Join(d, "tools", "mlx-embed-server"),
		snapshot: filepath.Join(d, "Qwen3-Embedding-0.6B"),
		exe:      filepath.Join(d, "bin", "embed-stack"),
		noConfig: filepath.Join(d, "empty"),
		notExec:  filepath.Join(d, "tools", "not-executable"),
	}
	for _, p := range []string{filepath.Dir(f.server), f.snapshot, filepath.Dir(f.exe), f.noConfig} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, mode := range map[string]os.FileMode{
		f.server:                                 0o755,
		f.notExec:                                0o644,
		f.exe:                                    0o755,
		filepath.Join(f.snapshot, "config.json"): 0o644,
	} {
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestWarmProgramResolve(t *testing.T) {
	f := newMLXFixture(t)
	// The default server location, next to an embed-stack that has one beside it.
	exeWithServer := filepath.Join(filepath.Dir(f.server), "embed-stack")
	if err := os.WriteFile(exeWithServer, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		in       WarmProgram
		platform string
		exe      string
		want     WarmProgram // when wantErr is ""
		wantErr  string      // a substring of the error
	}{
		{name: "default is llama", in: WarmProgram{}, platform: "linux/amd64",
			want: WarmProgram{Name: WarmLlama}},
		{name: "llama explicit", in: WarmProgram{Name: "llama"}, platform: "darwin/arm64",
			want: WarmProgram{Name: WarmLlama}},
		{name: "llama with an mlx flag", in: WarmProgram{Name: "llama", MLXModel: f.snapshot}, platform: "darwin/arm64",
			wantErr: "--mlx-server and --mlx-model apply only with --warm-backend mlx"},
		{name: "unknown backend", in: WarmProgram{Name: "metal"}, platform: "darwin/arm64",
			wantErr: `--warm-backend "metal": want llama`},
		{name: "mlx explicit server on linux", in: WarmProgram{Name: "mlx", MLXServer: f.server, MLXModel: f.snapshot}, platform: "linux/amd64",
			want: WarmProgram{Name: WarmMLX, MLXServer: f.server, MLXModel: f.snapshot}},
		{name: "mlx default server on darwin/arm64", in: WarmProgram{Name: "mlx", MLXModel: f.snapshot}, platform: "darwin/arm64", exe: exeWithServer,
			want: WarmProgram{Name: WarmMLX, MLXServer: f.server, MLXModel: f.snapshot}},
		{name: "mlx default server on linux", in: WarmProgram{Name: "mlx", MLXModel: f.snapshot}, platform: "linux/amd64", exe: exeWithServer,
			wantErr: "needs macOS on Apple Silicon (darwin/arm64), and this is linux/amd64; use --warm-backend llama, or name a worker built for this machine with --mlx-server PATH"},
		{name: "mlx default server on intel mac", in: WarmProgram{Name: "mlx", MLXModel: f.snapshot}, platform: "darwin/amd64", exe: exeWithServer,
			wantErr: "this is darwin/amd64"},
		{name: "mlx no server next to embed-stack", in: WarmProgram{Name: "mlx", MLXModel: f.snapshot}, platform: "darwin/arm64",
			wantErr: "no mlx-embed-server next to " + f.exe},
		{name: "mlx without model", in: WarmProgram{Name: "mlx", MLXServer: f.server}, platform: "darwin/arm64",
			wantErr: "--warm-backend mlx needs --mlx-model DIR"},
		{name: "mlx model missing", in: WarmProgram{Name: "mlx", MLXServer: f.server, MLXModel: filepath.Join(f.dir, "nope")}, platform: "darwin/arm64",
			wantErr: "no such file or directory"},
		{name: "mlx model is a file", in: WarmProgram{Name: "mlx", MLXServer: f.server, MLXModel: filepath.Join(f.snapshot, "config.json")}, platform: "darwin/arm64",
			wantErr: "is not a directory"},
		{name: "mlx model without config.json", in: WarmProgram{Name: "mlx", MLXServer: f.server, MLXModel: f.noConfig}, platform: "darwin/arm64",
			wantErr: "holds no config.json"},
		{name: "mlx server missing", in: WarmProgram{Name: "mlx", MLXServer: filepath.Join(f.dir, "nope", "srv"), MLXModel: f.snapshot}, platform: "darwin/arm64",
			wantErr: "no such file or directory"},
		{name: "mlx server is a directory", in: WarmProgram{Name: "mlx", MLXServer: f.snapshot, MLXModel: f.snapshot}, platform: "darwin/arm64",
			wantErr: "is not a file"},
		{name: "mlx server not executable", in: WarmProgram{Name: "mlx", MLXServer: f.notExec, MLXModel: f.snapshot}, platform: "darwin/arm64",
			wantErr: "is not executable"},
		{name: "mlx server bare name not in PATH", in: WarmProgram{Name: "mlx", MLXServer: "no-such-mlx-embed-server", MLXModel: f.snapshot}, platform: "darwin/arm64",
			wantErr: "--mlx-server no-such-mlx-embed-server:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := tc.exe
			if exe == "" {
				exe = f.exe
			}
			got, err := tc.in.Resolve(tc.platform, exe)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("resolve = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("resolve = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestWarmProgramRelativePaths: relative paths become absolute against the working
// directory, so the worker finds them whatever its own directory.
func TestWarmProgramRelativePaths(t *testing.T) {
	f := newMLXFixture(t)
	t.Chdir(f.dir)
	got, err := WarmProgram{Name: "mlx", MLXServer: "./tools/mlx-embed-server", MLXModel: "Qwen3-Embedding-0.6B"}.Resolve("darwin/arm64", f.exe)
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir may sit under a symlink (macOS /var); compare as resolved.
	same := func(a, b string) bool {
		ra, err1 := filepath.EvalSymlinks(a)
		rb, err2 := filepath.EvalSymlinks(b)
		return err1 == nil && err2 == nil && ra == rb && filepath.IsAbs(a)
	}
	if !same(got.MLXServer, f.server) || !same(got.MLXModel, f.snapshot) {
		t.Errorf("resolve = %+v; want absolute %s and %s", got, f.server, f.snapshot)
	}
}

// TestWarmProgramSpec: the MLX warm worker gets the llama.cpp worker's arguments with
// the subcommand word and the device flags dropped and --model pointing at the
// snapshot; llama is unchanged.
func TestWarmProgramSpec(t *testing.T) {
	args := WorkerArgs{Model: "/models/q.gguf", Threads: 8, LogFormat: "json", LogLevel: "info", Ctx: 8192, Batch: 512,
		ReleaseKV: 30 * time.Second, DeviceArgs: DeviceArgs{Device: "auto"}}
	llama := WorkerSpec{Path: "/opt/embed-stack/bin/embed-stack", Args: append([]string{"worker"}, args.Args()...)}
	llama.Env = []string{"A=1"}
	if want := []string{"worker", "--model", "/models/q.gguf", "--threads", "8", "--log-format", "json", "--log-level", "info",
		"--device", "auto", "--gpu-layers", "0", "--ctx", "8192", "--batch", "512", "--release-kv", "30s"}; !slices.Equal(llama.Args, want) {
		t.Fatalf("llama args %q\nwant %q", llama.Args, want)
	}
	orig := slices.Clone(llama.Args)
	mlx := WarmProgram{Name: WarmMLX, MLXServer: "/opt/mlx/mlx-embed-server", MLXModel: "/models/Qwen3-Embedding-0.6B"}
	for _, tc := range []struct {
		name   string
		choice WarmProgram
		want   WorkerSpec
	}{
		{name: "llama", choice: WarmProgram{Name: WarmLlama}, want: llama},
		{name: "mlx", choice: mlx, want: WorkerSpec{
			Path: "/opt/mlx/mlx-embed-server",
			Args: []string{"--model", "/models/Qwen3-Embedding-0.6B", "--threads", "8", "--log-format", "json", "--log-level", "info", "--ctx", "8192", "--batch", "512"},
			Env:  []string{"A=1"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.choice.Spec(args, llama)
			if got.Path != tc.want.Path || !slices.Equal(got.Args, tc.want.Args) || !slices.Equal(got.Env, tc.want.Env) {
				t.Fatalf("spec = %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if !slices.Equal(llama.Args, orig) {
		t.Errorf("spec modified its input: %q", llama.Args)
	}
}

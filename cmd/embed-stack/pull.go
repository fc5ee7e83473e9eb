package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/hub"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
)

// pullCommand is `embed-stack pull REF`: it downloads a model into the Hugging Face
// cache ahead of time, with progress, as `ollama pull` does, so that a later serve
// or embed of the same reference starts without waiting for the download (and works
// with HF_HUB_OFFLINE=1). It prints the cached file's path (issue 27).
type pullCommand struct {
	refs           []string
	stdout, stderr io.Writer
}

func newPull(args []string, stdout, stderr io.Writer) (command, int) {
	s := flagconfig.New("embed-stack pull", "embed-stack pull REF...",
		"Downloads each model into the Hugging Face cache (HF_HOME, HF_HUB_CACHE; HF_TOKEN and\n"+
			"HF_ENDPOINT apply), with progress, and prints the path of each cached file. REF is what\n"+
			"--model takes: Qwen/Qwen3-Embedding-0.6B-GGUF (its F16 file), :Q8_0 to name a type, or\n"+
			"owner/name/FILE.gguf. A file already cached for the reference's revision is not\n"+
			"downloaded again. Then serve starts without the download, offline too.")
	s.Args = "REF..."
	err := s.Parse(args, nil)
	if err == nil && len(s.PositionalArgs()) == 0 {
		err = &flagconfig.UsageError{Msg: "name a model: embed-stack pull Qwen/Qwen3-Embedding-0.6B-GGUF", Synopsis: s.Synopsis, Command: s.Name}
	}
	if err != nil {
		return nil, flagconfig.Report(err, s.Name, stdout, stderr)
	}
	return &pullCommand{refs: s.PositionalArgs(), stdout: stdout, stderr: stderr}, 0
}

// Run resolves each reference, downloading what the cache lacks; SIGINT stops a
// download, which a later pull resumes.
func (c *pullCommand) Run(ctx context.Context) error {
	opts := hub.OptionsFromEnv()
	opts.Logger = slog.New(slog.NewTextHandler(c.stderr, nil))
	opts.Progress = c.stderr
	opts.IsTerminal = isTerminal(os.Stderr) && c.stderr == io.Writer(os.Stderr)
	for _, ref := range c.refs {
		path, err := hub.Resolve(ctx, ref, opts)
		if err != nil {
			fmt.Fprintf(c.stderr, "embed-stack pull: %v\n", err)
			return exitStatus(1)
		}
		fmt.Fprintln(c.stderr, pulledLine(ref, path))
		fmt.Fprintln(c.stdout, path)
	}
	return nil
}

// Close does nothing: Run's context ends the download.
func (c *pullCommand) Close() error { return nil }

// pulledLine says what a pull left in the cache: the file, its weights' type, its size
// and, for a file the Hub cache stores under its sha256 (an LFS blob, checked when it
// was downloaded), that sha256.
func pulledLine(ref, path string) string {
	line := ref + ": " + filepath.Base(path)
	if f, err := gguf.Open(path); err == nil {
		line += ", " + f.WeightType().String()
		f.Close()
	}
	real, err := filepath.EvalSymlinks(path)
	if st, serr := os.Stat(real); err == nil && serr == nil {
		line += fmt.Sprintf(", %.1f MB", float64(st.Size())/1e6)
		if blob := filepath.Base(real); filepath.Base(filepath.Dir(real)) == "blobs" && len(blob) == 64 {
			line += ", sha256 " + blob
		}
	}
	return line
}

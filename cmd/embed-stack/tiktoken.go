package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// tiktokenCacheCommand is `embed-stack tiktoken-cache DIR`: it writes Python
// tiktoken's cl100k_base file into DIR from the vocabulary the server decodes
// LangChain's token ids with, so that LangChain Python (and anything else built on
// tiktoken) works on a machine that cannot download it, with nothing but this
// binary (issue 27).
type tiktokenCacheCommand struct {
	dir            string
	stdout, stderr io.Writer
}

func newTiktokenCache(args []string, stdout, stderr io.Writer) (command, int) {
	s := flagconfig.New("embed-stack tiktoken-cache", "embed-stack tiktoken-cache DIR",
		"Writes tiktoken's cl100k_base file into DIR (created if missing), under the name and\n"+
			"with the sha256 tiktoken checks, so that LangChain's OpenAIEmbeddings and other\n"+
			"tiktoken users work offline. It prints the line that points tiktoken at DIR:\n\n"+
			"  eval \"$(embed-stack tiktoken-cache ~/.cache/tiktoken)\"")
	s.Args = "DIR"
	err := s.Parse(args, nil)
	if err == nil && len(s.PositionalArgs()) != 1 {
		err = &flagconfig.UsageError{Msg: "give one folder: embed-stack tiktoken-cache DIR", Synopsis: s.Synopsis, Command: s.Name}
	}
	if err != nil {
		return nil, flagconfig.Report(err, s.Name, stdout, stderr)
	}
	return &tiktokenCacheCommand{dir: s.PositionalArgs()[0], stdout: stdout, stderr: stderr}, 0
}

// Run writes the file (an existing one with the right sha256 is kept) and prints
// the export line on stdout, the file's path on stderr.
func (c *tiktokenCacheCommand) Run(context.Context) error {
	path, err := tokenizer.WriteCl100kTiktokenCache(c.dir)
	if err != nil {
		fmt.Fprintln(c.stderr, "embed-stack tiktoken-cache:", err)
		return exitStatus(1)
	}
	abs, err := filepath.Abs(c.dir)
	if err != nil {
		abs = c.dir
	}
	fmt.Fprintf(c.stderr, "cl100k_base for tiktoken: %s\n", path)
	fmt.Fprintf(c.stdout, "export TIKTOKEN_CACHE_DIR=%s\n", shellQuote(abs))
	return nil
}

// Close does nothing: writing one file is not interrupted.
func (c *tiktokenCacheCommand) Close() error { return nil }

// shellQuote quotes s for a POSIX shell when it holds anything but safe characters.
func shellQuote(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '/' || r == '.' || r == '_' || r == '-' || r == '+' || r == ':') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

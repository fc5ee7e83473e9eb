package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/server"
)

// psCommand is `embed-stack ps`: the models a running server holds loaded now,
// with their idle time, as `ollama ps` lists Ollama's (issue 27). It reads GET
// /api/ps.
type psCommand struct {
	addr           string
	apiKeys        []string
	stdout, stderr io.Writer
}

func newPS(args []string, stdout, stderr io.Writer) (command, int) {
	c := &psCommand{stdout: stdout, stderr: stderr}
	s := flagconfig.New("embed-stack ps", "embed-stack ps [--addr HOST:PORT]",
		"Lists the models a running embed-stack serve holds loaded now: each with its worker's\n"+
			"process, the requests in flight, how long it has been idle and, with --keep-alive,\n"+
			"until when it stays loaded. GET /api/ps gives the same as JSON.")
	s.Env = true
	s.String(&c.addr, "addr", "HOST:PORT", "127.0.0.1:8080", "the server's address, as serve's --addr (EMBED_STACK_ADDR applies to both), or its URL")
	s.List(&c.apiKeys, "api-key", "KEY", "the server's API key, when it requires one (the first, if several)")
	if err := s.Parse(args, os.Getenv); err != nil {
		return nil, flagconfig.Report(err, s.Name, stdout, stderr)
	}
	return c, 0
}

// Run asks the server and prints the table.
func (c *psCommand) Run(ctx context.Context) error {
	key := ""
	if len(c.apiKeys) > 0 {
		key = c.apiKeys[0]
	}
	list, err := server.FetchPS(ctx, c.addr, key)
	if err != nil {
		fmt.Fprintln(c.stderr, "embed-stack ps:", err)
		return exitStatus(1)
	}
	server.WritePS(c.stdout, list, time.Now())
	return nil
}

// Close does nothing: one request, bounded by its timeout.
func (c *psCommand) Close() error { return nil }

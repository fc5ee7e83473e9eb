package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
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

// psURL turns --addr into the URL of GET /api/ps: a listening address on every
// interface (0.0.0.0:8080, :8080) is reached on loopback.
func psURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimSuffix(addr, "/") + "/api/ps"
	}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	return "http://" + addr + "/api/ps"
}

// Run asks the server and prints the table.
func (c *psCommand) Run(ctx context.Context) error {
	list, err := c.fetch(ctx)
	if err != nil {
		fmt.Fprintln(c.stderr, "embed-stack ps:", err)
		return exitStatus(1)
	}
	writePS(c.stdout, list, time.Now())
	return nil
}

func (c *psCommand) fetch(ctx context.Context) (*server.PSResponse, error) {
	url := psURL(c.addr)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %w", c.addr, err)
	}
	if len(c.apiKeys) > 0 {
		req.Header.Set("Authorization", "Bearer "+c.apiKeys[0])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no answer from %s (is embed-stack serve running there? --addr names another address): %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("GET %s: 401: the server requires an API key (--api-key or EMBED_STACK_API_KEY)", url)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var list server.PSResponse
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s: not embed-stack's answer: %w", url, err)
	}
	return &list, nil
}

// writePS prints the models as a table: IDLE is "-" while requests are in
// flight, UNTIL "never" without a keep-alive.
func writePS(w io.Writer, list *server.PSResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTASK\tPID\tIN FLIGHT\tIDLE\tUNTIL")
	for _, m := range list.Models {
		idle, until := "-", "never"
		if m.IdleSeconds != nil {
			idle = roundDuration(time.Duration(*m.IdleSeconds * float64(time.Second))).String()
		}
		switch {
		case m.ExpiresAt != nil:
			until = roundDuration(m.ExpiresAt.Sub(now)).String()
		case m.IdleSeconds == nil:
			until = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", m.Name, m.Task, m.PID, m.InFlight, idle, until)
	}
	tw.Flush()
}

// roundDuration rounds d to the second (to the 100 ms below 10 s), never below 0.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// Close does nothing: one request, bounded by its timeout.
func (c *psCommand) Close() error { return nil }

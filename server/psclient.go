package server

// The client side of GET /api/ps, for `embed-stack ps`: asking a running server
// which models it holds loaded, and the table it prints.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

// psURL turns an address as serve's --addr gives it (or the server's URL) into the URL of GET /api/ps: a listening address on every
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

// FetchPS asks the server at addr (as serve's --addr gives it, or its URL) for
// the models it holds loaded (GET /api/ps), within 10 seconds, with apiKey as its
// bearer token unless it is "". The errors say what to change: the address, or
// the key.
func FetchPS(ctx context.Context, addr, apiKey string) (*PSResponse, error) {
	url := psURL(addr)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %w", addr, err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
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
	var list PSResponse
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s: not embed-stack's answer: %w", url, err)
	}
	return &list, nil
}

// WritePS prints the models as `embed-stack ps` lists them, a table of the names
// as --model gave them: IDLE is "-" while requests are in flight, UNTIL "never"
// without a keep-alive (an expiry over 20 years ahead, as `ollama ps` reads it).
func WritePS(w io.Writer, list *PSResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTASK\tPID\tIN FLIGHT\tIDLE\tUNTIL")
	for _, m := range list.Models {
		idle, until := "-", "never"
		if m.IdleSeconds != nil {
			idle = roundDuration(time.Duration(*m.IdleSeconds * float64(time.Second))).String()
		}
		if left := m.ExpiresAt.Sub(now); !m.ExpiresAt.IsZero() && left < 20*365*24*time.Hour {
			until = roundDuration(left).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", strings.TrimSuffix(m.Name, ":latest"), m.Task, m.PID, m.InFlight, idle, until)
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

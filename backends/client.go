package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Client speaks the worker protocol to one worker over its Unix socket. It is safe
// for concurrent use and keeps idle connections for reuse; Close drops them.
type Client struct {
	socket    string
	transport *http.Transport
	http      *http.Client
	pid       int    // the worker's process id when the supervisor knows it, for spans
	role      string // roleWarm or roleEphemeral when a supervisor started the worker
}

// NewClient returns a client for the worker listening on socketPath. It does not
// connect until the first request.
func NewClient(socketPath string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		// Enough idle connections for the concurrent requests one server sends to
		// one worker, so they are not redialled for each request.
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // the vectors are local; gzip would only cost CPU
	}
	return &Client{socket: socketPath, transport: tr, http: &http.Client{Transport: tr}}
}

// SocketPath returns the socket the client talks to.
func (c *Client) SocketPath() string { return c.socket }

// Close drops the client's idle connections. Requests in flight are not affected.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// clientURL is the base of request URLs; the host is ignored by the Unix dialer.
const clientURL = "http://worker"

// maxErrorBody bounds how much of a non-200 answer or a health answer is read.
const maxErrorBody = 64 << 10

// Health asks the worker for its state. A loading worker is not an error: the result
// has Status StatusLoading. An error means the worker could not be asked or answered
// outside the protocol.
func (c *Client) Health(ctx context.Context) (Health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+pathHealth, nil)
	if err != nil {
		return Health{}, fmt.Errorf("health request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Health{}, fmt.Errorf("asking the worker at %s for its health: %w", c.socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return Health{}, fmt.Errorf("reading the health of the worker at %s: %w", c.socket, err)
	}
	var h Health
	if err := json.Unmarshal(body, &h); err != nil {
		return Health{}, fmt.Errorf("worker at %s answered /health with %d %q: %w", c.socket, resp.StatusCode, snippet(body), err)
	}
	switch {
	case resp.StatusCode == http.StatusOK && h.Status == StatusReady:
		if err := h.Info().validate(); err != nil {
			return Health{}, fmt.Errorf("worker at %s is ready but unusable: %w", c.socket, err)
		}
		return h, nil
	case resp.StatusCode == http.StatusServiceUnavailable && h.Status == StatusLoading:
		return h, nil
	default:
		return Health{}, fmt.Errorf("worker at %s answered /health with %d and status %q", c.socket, resp.StatusCode, h.Status)
	}
}

// Embed sends sequences of token ids and returns one vector per sequence, in order.
//
// Errors: *WorkerInputError when the worker refused the input (400);
// *UnavailableError (errors.Is ErrUnavailable) when the worker is loading or could
// not be reached or died before answering; ctx's error when ctx ended; any other
// error for a worker failure (500) or an answer outside the protocol. Nothing is
// retried: the request may be what broke the worker.
//
// The call is the client span worker.call; its W3C trace context is sent along
// (or, without a span in ctx, a traceparent put there with [ContextWithTraceparent]),
// so the worker's spans join the caller's trace.
func (c *Client) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	ctx, st := c.startCall(ctx, seqs)
	vecs, err := c.embed(ctx, seqs)
	st.End(err)
	return vecs, err
}

func (c *Client) embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	payload, err := json.Marshal(embedRequest{Tokens: seqs})
	if err != nil {
		return nil, fmt.Errorf("encoding the embed request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, clientURL+pathEmbed, bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("embed request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	injectTrace(ctx, req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(ctx, resp)
	}
	var out embedResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		var syntaxErr *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
			return nil, fmt.Errorf("worker at %s answered /embed with malformed JSON: %w", c.socket, err)
		}
		// The body stopped short: the worker went away while answering.
		return nil, c.transportError(ctx, err)
	}
	if len(out.Embeddings) != len(seqs) {
		return nil, fmt.Errorf("worker at %s returned %d embeddings for %d sequences", c.socket, len(out.Embeddings), len(seqs))
	}
	for i, v := range out.Embeddings {
		if len(v) == 0 || len(v) != len(out.Embeddings[0]) {
			return nil, fmt.Errorf("worker at %s returned embedding %d with %d floats, embedding 0 with %d", c.socket, i, len(v), len(out.Embeddings[0]))
		}
	}
	return out.Embeddings, nil
}

// transportError classifies a failure to get an answer: ctx's end, or an
// unavailable worker.
func (c *Client) transportError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("embedding on the worker at %s: %w", c.socket, ctxErr)
	}
	var op *net.OpError
	dial := errors.As(err, &op) && op.Op == "dial"
	return &UnavailableError{Cause: fmt.Errorf("worker at %s: %w", c.socket, err), undelivered: dial}
}

// statusError turns a non-200 answer into the error its status stands for.
func (c *Client) statusError(ctx context.Context, resp *http.Response) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return c.transportError(ctx, err)
	}
	msg := strings.TrimSpace(string(body))
	index := -1
	var er errorResponse
	if json.Unmarshal(body, &er) == nil && er.Error != "" {
		msg = er.Error
		if er.Index != nil {
			index = *er.Index
		}
	}
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return &WorkerInputError{Index: index, Message: msg}
	case http.StatusServiceUnavailable:
		return &UnavailableError{
			RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After")),
			Cause:      fmt.Errorf("worker at %s: %s", c.socket, msg),
		}
	default:
		return fmt.Errorf("worker at %s answered %d: %s", c.socket, resp.StatusCode, msg)
	}
}

// parseRetryAfter reads a delay in seconds; 0 when absent or not a number.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

package chroma

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// APIError is a request Chroma refused, with its {"error","message"} body.
type APIError struct {
	Status  int    `json:"-"`
	Kind    string `json:"error"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	switch {
	case e.Message == "":
		return fmt.Sprintf("Chroma answered %d", e.Status)
	case e.Kind == "":
		return fmt.Sprintf("Chroma refused it (%d): %s", e.Status, e.Message)
	}
	return fmt.Sprintf("Chroma refused it (%d %s): %s", e.Status, e.Kind, e.Message)
}

// transient says a failed try may succeed later: no answer at all, or 429 or 5xx.
func transient(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusTooManyRequests || ae.Status >= 500
	}
	return true
}

// call sends one request, trying again while the failure is transient, and
// decodes the answer into out (nil: ignored).
func (s *Store) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	attempts := s.Attempts
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	wait := s.wait
	if wait == nil {
		wait = func(i int) time.Duration { return 500 * time.Millisecond << i }
	}
	var err error
	for i := range attempts {
		if i > 0 {
			d := wait(i - 1)
			s.logger().Warn("Chroma request failed; trying again", "request", method+" "+path, "attempt", i+1, "of", attempts, "wait", d, "error", err.Error())
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		if err = s.try(ctx, method, path, body, out); err == nil || ctx.Err() != nil || !transient(err) {
			break
		}
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var ae *APIError
	if errors.As(err, &ae) {
		if transient(err) {
			return fmt.Errorf("%s: %w (%d tries)", s, err, attempts)
		}
		return fmt.Errorf("%s: %w", s, err)
	}
	return fmt.Errorf("%s is unreachable: %w (%d tries); start it, or check the host and port of --output", s, err, attempts)
}

func (s *Store) try(ctx context.Context, method, path string, body []byte, out any) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.BaseURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("read the answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		ae := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(data, ae) != nil || ae.Message == "" {
			ae.Message = strings.TrimSpace(string(data))
			if len(ae.Message) > 300 {
				ae.Message = ae.Message[:300] + "…"
			}
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not what Chroma sends (%v): is %s a Chroma server?", method, path, err, s.BaseURL)
	}
	return nil
}

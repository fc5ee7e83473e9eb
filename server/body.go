package server

import (
	"compress/gzip"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
)

// Defaults of the body and response timeouts in Config.
const (
	// DefaultBodyTimeout bounds reading one request body. It is short because the
	// body is read before admission: a client that sends slowly holds a connection
	// and a goroutine, never one of the MaxConcurrentRequests slots, and this bounds
	// how long. 32 MiB (the default body limit) arrive in it at 1.1 MB/s.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultWriteStallTimeout bounds how long writing an answer may make no
	// progress: every writeChunk bytes must reach the connection within it. A client
	// that stops reading its answers holds its slot this long, not until a deadline
	// sized for the longest request.
	DefaultWriteStallTimeout = 30 * time.Second
	// writeChunk is the unit whose write StallTimeout bounds.
	writeChunk = 64 << 10
	// readChunk is the unit in which a body of unknown length is read and counted
	// against the body budget.
	readChunk = 64 << 10
)

// Body errors, mapped in errors.go.
var (
	// errBodyTimeout: the body did not arrive within Config.BodyTimeout (408).
	errBodyTimeout = errors.New("the request body did not arrive within the body timeout")
	// errBodyIncomplete: the body ended before its declared length, or its chunked
	// framing is broken (400).
	errBodyIncomplete = errors.New("the request body ended early or is malformed")
	// errClientGone: the connection failed while the body was read (499).
	errClientGone = errors.New("the client went away while sending the request body")
)

// encodingError is a Content-Encoding the server does not decode (415), or a gzip
// body that does not decompress (400).
type encodingError struct {
	encoding string
	bad      bool // the encoding is known but the body is not valid in it
	err      error
}

func (e *encodingError) Error() string {
	if e.bad {
		return "the request body is not valid " + e.encoding + ": " + e.err.Error()
	}
	return "unsupported Content-Encoding " + strconv.Quote(e.encoding)
}

// bodyBudgetError is a body refused because the bodies held in memory already
// reach the budget (429).
type bodyBudgetError struct{ budget int64 }

func (e *bodyBudgetError) Error() string {
	return "the server holds its limit of " + strconv.FormatInt(e.budget, 10) + " bytes of request bodies"
}

// bodyBudget bounds the bytes of request bodies held in memory at once, read or
// being read. Bodies are read before admission, so admission no longer bounds their
// memory; this does, at what admission used to allow: MaxConcurrentRequests bodies
// of MaxBodyBytes.
type bodyBudget struct {
	limit int64
	held  atomic.Int64
}

// take reserves n bytes, or fails when that would pass the limit.
func (b *bodyBudget) take(n int64) bool {
	if b.held.Add(n) > b.limit {
		b.held.Add(-n)
		return false
	}
	return true
}

func (b *bodyBudget) give(n int64) { b.held.Add(-n) }

// ctxBody is the gin key of the body read by readRequestBody.
const ctxBody = "body"

// readRequestBody is the first middleware of the work routes: it reads the whole
// body (decompressing gzip) within BodyTimeout, before admission, so that clients
// that send slowly never hold a MaxConcurrentRequests slot. Handlers get it from
// readBody. It also bounds every later write of the answer (stallWriter).
func (s *Server) readRequestBody() gin.HandlerFunc {
	return func(c *gin.Context) {
		body, held, err := s.readAll(c)
		defer s.bodies.give(held)
		if err != nil {
			writeError(c, err)
			return
		}
		c.Set(ctxBody, body)
		c.Writer = &stallWriter{ResponseWriter: c.Writer, rc: http.NewResponseController(c.Writer), stall: s.Config.WriteStallTimeout}
		c.Next()
	}
}

// readBody returns the body readRequestBody read.
func (s *Server) readBody(c *gin.Context) ([]byte, error) {
	return c.MustGet(ctxBody).([]byte), nil
}

// readAll reads the body within BodyTimeout and up to MaxBodyBytes (decompressed),
// reserving its bytes in the body budget as it goes. It returns the bytes reserved,
// which the caller gives back once the request is done, also on error.
func (s *Server) readAll(c *gin.Context) (body []byte, held int64, err error) {
	limit := s.Config.MaxBodyBytes
	r := c.Request
	if r.ContentLength > limit {
		return nil, 0, &http.MaxBytesError{Limit: limit}
	}
	var src io.Reader = r.Body
	gz := false
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		gz = true
	default:
		return nil, 0, &encodingError{encoding: enc}
	}
	rc := http.NewResponseController(c.Writer)
	// The deadline replaces the server's ReadTimeout for this request. It is
	// cleared once the body is in: net/http's background read, which notices a
	// client that leaves, would otherwise cancel the request when it passed.
	_ = rc.SetReadDeadline(time.Now().Add(s.Config.BodyTimeout)) // unsupported only in tests' recorders
	defer func() {
		if err != nil {
			// net/http reads what is left of a body before it answers (up to 256
			// KiB); a past deadline makes that fail at once, and the connection is
			// closed after the answer, instead of waiting for a client that may
			// never send it.
			_ = rc.SetReadDeadline(time.Now())
			return
		}
		_ = rc.SetReadDeadline(time.Time{})
	}()

	if gz {
		zr, err := gzip.NewReader(http.MaxBytesReader(c.Writer, r.Body, limit))
		if err != nil {
			return nil, 0, s.bodyError(err, "gzip")
		}
		defer zr.Close()
		src = zr
	}
	if r.ContentLength >= 0 && !gz {
		// A known length is reserved and allocated once; net/http's body ends at it.
		if !s.bodies.take(r.ContentLength) {
			return nil, 0, &bodyBudgetError{budget: s.bodies.limit}
		}
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(src, buf); err != nil {
			return nil, r.ContentLength, s.bodyError(err, "")
		}
		return buf, r.ContentLength, nil
	}
	// Otherwise chunk by chunk, the buffer doubling, each growth reserved first.
	var buf []byte
	for {
		if int64(len(buf)) > limit {
			return nil, held, &http.MaxBytesError{Limit: limit}
		}
		if grow := min(max(readChunk, int64(cap(buf))), limit+1-int64(cap(buf))); cap(buf)-len(buf) < readChunk/2 && grow > 0 {
			if !s.bodies.take(grow) {
				return nil, held, &bodyBudgetError{budget: s.bodies.limit}
			}
			held += grow
			nb := make([]byte, len(buf), int64(cap(buf))+grow)
			copy(nb, buf)
			buf = nb
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			enc := ""
			if gz {
				enc = "gzip"
			}
			return nil, held, s.bodyError(err, enc)
		}
	}
	if int64(len(buf)) > limit {
		return nil, held, &http.MaxBytesError{Limit: limit}
	}
	return buf, held, nil
}

// bodyError classifies a failed body read: too large, too slow, cut off, the
// client gone, or (with an encoding) not valid in it.
func (s *Server) bodyError(err error, encoding string) error {
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return errBodyTimeout
	case errors.Is(err, io.ErrUnexpectedEOF) && encoding == "":
		return errBodyIncomplete
	case errors.As(err, &netErr), errors.Is(err, net.ErrClosed):
		return errClientGone
	case encoding != "":
		return &encodingError{encoding: encoding, bad: true, err: err}
	}
	// net/http reports broken chunked framing as plain errors.
	return errors.Join(errBodyIncomplete, err)
}

// stallWriter bounds how long writing the answer may stall: before each
// writeChunk bytes it moves the connection's write deadline to StallTimeout from
// now. A client that stops reading then fails the write within that time, and the
// handler returns, freeing its slot.
type stallWriter struct {
	gin.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func (w *stallWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall)) // unsupported only in tests' recorders
		m, err := w.ResponseWriter.Write(b[:n])
		written += m
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

func (w *stallWriter) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

// Unwrap lets http.ResponseController reach the connection.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

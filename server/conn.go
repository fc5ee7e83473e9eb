package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the connection settings in Config.
const (
	// DefaultMaxConnections bounds the open client connections. Each costs a
	// goroutine, a file descriptor and about 10 KiB of buffers; idle keep-alive
	// connections count until IdleTimeout closes them. 1024 is 16 connections per
	// default admission slot, and well under the descriptor limit the Go runtime
	// raises the soft limit to.
	DefaultMaxConnections = 1024
	// DefaultHeaderTimeout bounds reading a request's headers (http.Server's
	// ReadHeaderTimeout).
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes keep-alive connections idle this long.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's header block (431 past it).
	DefaultMaxHeaderBytes = 64 << 10

	// refusedLinger bounds how long a refused connection is kept to let its
	// client read the 503 before the close: a close with unread input resets the
	// connection, and the client could lose the answer.
	refusedLinger = 500 * time.Millisecond
)

// errTooManyConnections is a connection refused past MaxConnections (503, written
// by the listener before any request is read).
var errTooManyConnections = errors.New("too many open connections")

// HTTPServer returns the http.Server for Handler with the timeouts Config implies:
//
//   - ReadHeaderTimeout = HeaderTimeout;
//   - ReadTimeout = HeaderTimeout + BodyTimeout, for the bodies of routes that do
//     not read them (the work routes read theirs within BodyTimeout themselves);
//   - WriteTimeout = HeaderTimeout + BodyTimeout + WriteStallTimeout, which covers
//     the answers of every route but the work routes, whose answers are bounded
//     by WriteStallTimeout per 64 KiB however long they take to compute;
//   - IdleTimeout and MaxHeaderBytes as configured.
//
// Serve it on LimitListener's listener. Call it at most once, instead of Handler.
func (s *Server) HTTPServer() *http.Server {
	h := s.Handler()
	c := s.Config
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.HeaderTimeout,
		ReadTimeout:       c.HeaderTimeout + c.BodyTimeout,
		WriteTimeout:      c.HeaderTimeout + c.BodyTimeout + c.WriteStallTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(c.Logger.Handler(), slog.LevelDebug),
	}
}

// LimitListener wraps ln so that at most Config.MaxConnections connections are
// open at once. A connection past the limit is answered 503 with Retry-After and
// closed at once, rather than left waiting in the kernel's backlog, where a client
// could not tell a full server from a dead one. Call it after Handler (or
// HTTPServer), which fills in the defaults.
func (s *Server) LimitListener(ln net.Listener) net.Listener {
	status, body, header := errorResponse(errTooManyConnections)
	b, _ := json.Marshal(body)
	resp := "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n" +
		"Content-Type: application/json; charset=utf-8\r\n" +
		"Retry-After: " + header.Get("Retry-After") + "\r\n" +
		"Connection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + string(b)
	s.conns = &connLimit{Listener: ln, max: int64(s.Config.MaxConnections), refusal: []byte(resp), logger: s.Config.Logger}
	return s.conns
}

// connLimit is LimitListener's listener.
type connLimit struct {
	net.Listener
	max     int64
	refusal []byte
	logger  *slog.Logger
	open    atomic.Int64
	refused atomic.Int64
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		if n := l.refused.Add(1); n&(n-1) == 0 { // log the 1st, 2nd, 4th, 8th... refusal
			l.logger.Warn("connection refused: --max-connections are open", "max_connections", l.max, "refused_total", l.refused.Load())
		}
		go refuse(c, l.refusal)
	}
}

// refuse answers a connection over the limit and closes it, letting the client
// read the answer first (see refusedLinger).
func refuse(c net.Conn, answer []byte) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refusedLinger))
	if _, err := c.Write(answer); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	buf := make([]byte, 4<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// limitedConn gives its place back once, when closed.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

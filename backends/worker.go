package backends

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// WorkerConfig configures [RunWorker]. The zero value of every field but SocketPath
// picks the documented default.
type WorkerConfig struct {
	// SocketPath is the Unix socket to serve on. Its directory must exist and should
	// be private (0700): the supervisor creates one per server. The path must not
	// exist yet; RunWorker removes the socket when it returns.
	SocketPath string

	// Stdin is read until EOF, which stops the worker: the supervisor holds the write
	// end of a pipe, so the worker also exits when its parent dies, even by SIGKILL.
	// nil means os.Stdin.
	Stdin io.Reader

	// IgnoreStdin turns the EOF watch off, for running a worker by hand with stdin on
	// /dev/null. Supervised workers leave it false.
	IgnoreStdin bool

	// ShutdownTimeout bounds how long requests in flight may finish once the worker
	// is told to stop; then their contexts are cancelled. 0 means 5s. Keep it below
	// the supervisor's StopTimeout, after which the worker is SIGKILLed.
	ShutdownTimeout time.Duration

	// Logger receives the worker's lifecycle messages. nil means slog.Default().
	Logger *slog.Logger
}

const (
	defaultShutdownTimeout = 5 * time.Second

	// abandonGrace is how long RunWorker waits, after cancelling the contexts of
	// requests that outlived ShutdownTimeout, before giving up on them and returning
	// without closing the engine they may still be using.
	abandonGrace = time.Second
)

// RunWorker is the main loop of a worker process. It listens on cfg.SocketPath
// (mode 0600) at once, so /health answers "loading" while load runs, then serves
// the engine load returns. It returns nil after an orderly stop, which any of these
// starts: ctx ends, SIGTERM or SIGINT arrives, or Stdin reaches EOF (the parent has
// gone or wants the worker to exit). On stop it drains requests in flight (see
// WorkerConfig.ShutdownTimeout), closes the engine if it implements io.Closer, and
// removes the socket.
//
// It returns an error when load fails (the caller should print it to stderr and
// exit non-zero: the supervisor quotes the tail of stderr), when load reports an
// unusable EngineInfo, or when the socket cannot be served.
//
// load cannot be interrupted: a stop requested while it runs makes RunWorker return
// at once, leaving load running in its goroutine; if it then succeeds, that engine is
// closed. A process exits right after RunWorker, so this costs nothing there.
//
// RunWorker registers for SIGTERM and SIGINT while it runs; the stdin reader it
// starts is never waited for, because a read from os.Stdin cannot be interrupted.
func RunWorker(ctx context.Context, cfg WorkerConfig, load func() (Engine, EngineInfo, error)) error {
	if cfg.SocketPath == "" {
		return errors.New("backends: WorkerConfig.SocketPath is empty; give the worker --socket PATH")
	}
	if load == nil {
		return errors.New("backends: RunWorker needs a load function")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	shutdownTimeout := cfg.ShutdownTimeout
	if shutdownTimeout <= 0 {
		shutdownTimeout = defaultShutdownTimeout
	}
	stdin := cfg.Stdin
	if stdin == nil {
		stdin = os.Stdin
	}

	ln, err := listenUnix(cfg.SocketPath, logger)
	if err != nil {
		return err
	}
	// The listener unlinks the socket when closed; this also covers early returns.
	defer func() {
		if err := os.Remove(cfg.SocketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			logger.Warn("removing the worker socket", "path", cfg.SocketPath, "err", err)
		}
	}()

	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()

	var (
		current atomic.Pointer[workerHandler]
		g       gate
	)
	current.Store(NewWorkerHandler(nil, EngineInfo{}, func() bool { return false }).(*workerHandler))
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !g.enter() {
				w.Header().Set("Retry-After", loadingRetryAfter)
				writeError(w, http.StatusServiceUnavailable, "the worker is shutting down", nil)
				return
			}
			defer g.leave()
			current.Load().ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	type loaded struct {
		engine Engine
		info   EngineInfo
		err    error
	}
	loadc := make(chan loaded)
	abandon := make(chan struct{})
	defer close(abandon)
	started := time.Now()
	go func() {
		var r loaded
		r.engine, r.info, r.err = load()
		if r.err == nil {
			r.err = r.info.validate()
		}
		select {
		case loadc <- r:
		case <-abandon:
			// RunWorker has returned; nobody will use this engine.
			closeEngine(r.engine, logger)
		}
	}()

	eof := make(chan struct{})
	if !cfg.IgnoreStdin {
		go func() {
			_, _ = io.Copy(io.Discard, stdin) // a read error counts as EOF: the parent is unreachable
			close(eof)
		}()
	}

	logger.Info("worker listening; loading the model", "socket", cfg.SocketPath, "pid", os.Getpid())
	var engine Engine
	var runErr error
loop:
	for {
		select {
		case r := <-loadc:
			loadc = nil
			if r.err != nil {
				runErr = fmt.Errorf("loading the model: %w", r.err)
				closeEngine(r.engine, logger)
				break loop
			}
			engine = r.engine
			current.Store(NewWorkerHandler(r.engine, r.info, nil).(*workerHandler))
			logger.Info("worker ready", "model", r.info.Model, "n_embd", r.info.NEmbd,
				"max_tokens", r.info.MaxTokens, "max_batch_tokens", r.info.MaxBatchTokens,
				"load_time", time.Since(started).Round(time.Millisecond))
		case <-ctx.Done():
			logger.Info("worker stopping", "reason", context.Cause(ctx))
			break loop
		case <-eof:
			logger.Info("worker stopping", "reason", "stdin reached EOF")
			break loop
		case err := <-serveErr:
			runErr = fmt.Errorf("serving %s: %w", cfg.SocketPath, err)
			break loop
		}
	}

	shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shCtx); err != nil {
		logger.Warn("requests still running after the shutdown timeout; cancelling them", "timeout", shutdownTimeout)
		_ = srv.Close() // cancels their contexts
	}
	if g.close(abandonGrace) {
		closeEngine(engine, logger)
	} else {
		logger.Warn("a request ignored its cancelled context; leaving the engine open", "grace", abandonGrace)
	}
	return runErr
}

// listenUnix creates the worker socket with mode 0600.
func listenUnix(path string, logger *slog.Logger) (net.Listener, error) {
	if err := checkSocketPath(path); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		logger.Warn("the socket directory is open to other users; the supervisor makes a 0700 one", "dir", dir, "mode", st.Mode().Perm())
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("socket %s already exists: is another worker serving it? Remove it or give another --socket", path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	// The mode net.Listen gives depends on the umask, which is process-wide and so
	// cannot be changed safely here. The moment between Listen and Chmod is harmless
	// because the directory already keeps other users out.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restricting %s to mode 0600: %w", path, err)
	}
	return ln, nil
}

// maxSocketPath is the longest Unix socket path the OS accepts (sun_path less its
// terminating NUL).
var maxSocketPath = func() int {
	if runtime.GOOS == "linux" {
		return 107
	}
	return 103 // macOS and the BSDs
}()

func checkSocketPath(path string) error {
	if len(path) > maxSocketPath {
		return fmt.Errorf("socket path %s is %d bytes; Unix sockets allow at most %d: use a shorter socket directory", path, len(path), maxSocketPath)
	}
	return nil
}

func closeEngine(e Engine, logger *slog.Logger) {
	c, ok := e.(io.Closer)
	if !ok {
		return
	}
	if err := c.Close(); err != nil {
		logger.Warn("closing the engine", "err", err)
	}
}

// gate lets requests use the engine until close, and lets close wait for the ones
// inside. An RWMutex rather than a WaitGroup: requests may still arrive while close
// waits, which a WaitGroup forbids; here they queue behind the writer and then see
// closed.
type gate struct {
	mu     sync.RWMutex // held for reading by each request inside
	closed bool         // guarded by mu
}

func (g *gate) enter() bool {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return false
	}
	return true
}

func (g *gate) leave() { g.mu.RUnlock() }

// close shuts the gate and reports whether every request inside left within
// timeout. After a false return the gate closes when they do leave.
func (g *gate) close(timeout time.Duration) bool {
	drained := make(chan struct{})
	go func() {
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		close(drained)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-drained:
		return true
	case <-t.C:
		return false
	}
}

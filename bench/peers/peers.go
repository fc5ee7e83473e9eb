// Package peers starts the servers a benchmark run compares on this machine:
// embed-stack's own `serve` and Ollama (built from the Go module cache by
// `make bench-peers`, see README.md), each serving the same GGUF with the same
// thread count, in a process group of its own so that stopping it stops its
// workers too. A Process reports its pid (the root of the tree whose memory
// package bench samples), its OpenAI base URL and its cold start: process start to
// the first 200 from POST /v1/embeddings.
//
// It knows how to start and stop these programs and nothing of what is measured.
package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/embed-stack/embed-stack/internal/tail"
)

// Process is a started server.
type Process struct {
	Name string
	// BaseURL is the OpenAI API base, e.g. http://127.0.0.1:43123/v1.
	BaseURL string
	// Model is the model name to send.
	Model string
	PID   int
	// ColdStart is process start to the first 200 from POST /v1/embeddings.
	ColdStart time.Duration
	// About says what runs and how it was configured.
	About string

	cmd  *exec.Cmd
	out  *tail.Buffer
	done chan struct{}
	err  error // set before done is closed
	stop sync.Once
}

// stopGrace is how long a server may take to exit after SIGTERM before SIGKILL.
const stopGrace = 15 * time.Second

// start runs cmd in a process group of its own, its output kept, with one reaper
// goroutine.
func start(name string, cmd *exec.Cmd) (*Process, error) {
	p := &Process{Name: name, cmd: cmd, out: tail.New(64<<10, nil), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that keeps the output pipe open must not hold Wait forever.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("peers: start %s: %w", name, err)
	}
	p.PID = cmd.Process.Pid
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Stop sends SIGTERM to the process group, then SIGKILL after a grace period, and
// waits for the process to exit. It is idempotent.
func (p *Process) Stop() error {
	var err error
	p.stop.Do(func() {
		_ = syscall.Kill(-p.PID, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			<-p.done
			err = fmt.Errorf("peers: %s did not exit within %s of SIGTERM and was killed", p.Name, stopGrace)
		}
		// Whatever the server left behind in its group goes too.
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	})
	return err
}

// Output is the tail of the process's stdout and stderr.
func (p *Process) Output() string { return p.out.String() }

// exited returns an error naming the exit and the output's tail once the process has
// exited, nil while it runs.
func (p *Process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("peers: %s exited (%v); its output ends:\n%s", p.Name, p.err, p.Output())
	default:
		return nil
	}
}

// waitFirst200 posts a short input to /v1/embeddings until it gets 200; it fails
// when the process exits, ctx ends or timeout passes.
func (p *Process) waitFirst200(ctx context.Context, timeout time.Duration) error {
	body, _ := json.Marshal(map[string]any{"model": p.Model, "input": []string{"The first light of the morning."}})
	return p.poll(ctx, timeout, func(c *http.Client) (bool, string) {
		resp, err := c.Post(p.BaseURL+"/embeddings", "application/json", bytes.NewReader(body))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	})
}

// poll calls try every 20ms until it succeeds. A request in flight is bounded by
// what is left of timeout, so a slow model load is not cut short.
func (p *Process) poll(ctx context.Context, timeout time.Duration, try func(*http.Client) (bool, string)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		if err := p.exited(); err != nil {
			return err
		}
		c := &http.Client{Timeout: time.Until(deadline), Transport: &http.Transport{Proxy: nil}}
		ok, msg := try(c)
		if ok {
			return nil
		}
		last = msg
		if time.Now().After(deadline) {
			return fmt.Errorf("peers: %s not ready within %s (last answer: %s); its output ends:\n%s", p.Name, timeout, last, p.Output())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("peers: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// EmbedStack starts `embed-stack serve`.
type EmbedStack struct {
	// Bin is the embed-stack executable; Model the GGUF.
	Bin, Model string
	// Threads per worker (0: serve's default, the number of CPUs).
	Threads int
	// Args are further serve flags.
	Args []string
	// CacheMiB turns the embedding cache on (serve --cache-size; 0: off). Start
	// then also waits until the cache is in use: it keys on the model file's
	// sha256, hashed in the background after start, and is skipped until then.
	CacheMiB int
	// ReadyTimeout bounds start-up (0: 5 minutes).
	ReadyTimeout time.Duration
}

// Start starts the server and waits for its first 200 (and, with CacheMiB, for its
// model's digest; the cold start ends at the first 200).
func (e EmbedStack) Start(ctx context.Context) (*Process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--model", e.Model, "--addr", addr, "--log-level", "warn"}
	if e.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(e.Threads))
	}
	if e.CacheMiB > 0 {
		args = append(args, "--cache-size", strconv.Itoa(e.CacheMiB))
	}
	args = append(args, e.Args...)
	began := time.Now()
	p, err := start("embed-stack", exec.Command(e.Bin, args...))
	if err != nil {
		return nil, err
	}
	p.BaseURL, p.Model = "http://"+addr+"/v1", "bench"
	p.About = "embed-stack " + strings.Join(args[:1], " ") + " " + strings.Join(redactPaths(args[1:]), " ")
	timeout := orDuration(e.ReadyTimeout, 5*time.Minute)
	if err := p.waitFirst200(ctx, timeout); err != nil {
		p.Stop()
		return nil, err
	}
	p.ColdStart = time.Since(began)
	if e.CacheMiB > 0 {
		if err := p.waitDigest(ctx, "http://"+addr, timeout); err != nil {
			p.Stop()
			return nil, err
		}
	}
	return p, nil
}

// waitDigest polls GET /api/tags until every model there has its digest: the
// point from which embed-stack's cache is used.
func (p *Process) waitDigest(ctx context.Context, base string, timeout time.Duration) error {
	return p.poll(ctx, timeout, func(c *http.Client) (bool, string) {
		resp, err := c.Get(base + "/api/tags")
		if err != nil {
			return false, err.Error()
		}
		var tags struct {
			Models []struct {
				Digest string `json:"digest"`
			} `json:"models"`
		}
		err = json.NewDecoder(resp.Body).Decode(&tags)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || len(tags.Models) == 0 {
			return false, fmt.Sprintf("GET /api/tags: HTTP %d (%v)", resp.StatusCode, err)
		}
		for _, m := range tags.Models {
			if m.Digest == "" {
				return false, "GET /api/tags: a model without its digest yet"
			}
		}
		return true, ""
	})
}

// Ollama starts `ollama serve` with a private store and registers the GGUF in it as
// a model (`ollama create` from a Modelfile whose FROM is the file).
type Ollama struct {
	// Bin is the ollama executable (bin/ollama from `make bench-peers`).
	Bin string
	// Model is the GGUF to serve.
	Model string
	// Home holds Ollama's store (OLLAMA_MODELS) and keys (HOME); it is kept
	// between runs so the 1 GB blob is copied once.
	Home string
	// Threads is num_thread (0: Ollama's default, the number of physical cores).
	Threads int
	// NumCtx is num_ctx, the longest input Ollama embeds without truncating it
	// (0: Ollama's default, 4096 on a machine without a GPU).
	NumCtx int
	// Name is the model's name in Ollama's store (default "embed-stack-bench").
	Name string
	// ReadyTimeout bounds start-up and model load (0: 5 minutes).
	ReadyTimeout time.Duration
}

// Start starts ollama serve, creates the model and waits for its first 200. Its cold
// start is serve's start to serve answering plus the first embedding request (the
// model loads on demand), without the create step.
func (o Ollama) Start(ctx context.Context) (*Process, error) {
	model, err := filepath.Abs(o.Model)
	if err != nil {
		return nil, fmt.Errorf("peers: model path: %w", err)
	}
	home, err := filepath.Abs(o.Home)
	if err != nil {
		return nil, fmt.Errorf("peers: ollama home: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(home, "models"), 0o755); err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	name := o.Name
	if name == "" {
		name = "embed-stack-bench"
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	env := []string{
		"HOME=" + home,
		"OLLAMA_HOST=" + addr,
		"OLLAMA_MODELS=" + filepath.Join(home, "models"),
		// Keep the model loaded for the whole run: unloading after the default five
		// idle minutes would put a model load inside a timed request.
		"OLLAMA_KEEP_ALIVE=-1",
		"OLLAMA_NOPRUNE=1",
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OLLAMA_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	timeout := orDuration(o.ReadyTimeout, 5*time.Minute)

	began := time.Now()
	cmd := exec.Command(o.Bin, "serve")
	cmd.Env = env
	p, err := start("ollama", cmd)
	if err != nil {
		return nil, err
	}
	p.BaseURL, p.Model = "http://"+addr+"/v1", name
	version := ""
	if err := p.poll(ctx, timeout, func(c *http.Client) (bool, string) {
		resp, err := c.Get("http://" + addr + "/api/version")
		if err != nil {
			return false, err.Error()
		}
		var v struct{ Version string }
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		version = v.Version
		return resp.StatusCode == http.StatusOK && err == nil, fmt.Sprintf("HTTP %d", resp.StatusCode)
	}); err != nil {
		p.Stop()
		return nil, err
	}
	serveUp := time.Since(began)

	var mf strings.Builder
	fmt.Fprintf(&mf, "FROM %s\n", model)
	params := []string{}
	if o.Threads > 0 {
		fmt.Fprintf(&mf, "PARAMETER num_thread %d\n", o.Threads)
		params = append(params, fmt.Sprintf("num_thread %d", o.Threads))
	}
	if o.NumCtx > 0 {
		fmt.Fprintf(&mf, "PARAMETER num_ctx %d\n", o.NumCtx)
		params = append(params, fmt.Sprintf("num_ctx %d", o.NumCtx))
	}
	mfPath := filepath.Join(home, "Modelfile")
	if err := os.WriteFile(mfPath, []byte(mf.String()), 0o644); err != nil {
		p.Stop()
		return nil, fmt.Errorf("peers: %w", err)
	}
	create := exec.CommandContext(ctx, o.Bin, "create", name, "-f", mfPath)
	create.Env = env
	if out, err := create.CombinedOutput(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("peers: ollama create %s: %w\n%s", name, err, lastLines(string(out), 20))
	}

	first := time.Now()
	if err := p.waitFirst200(ctx, timeout); err != nil {
		p.Stop()
		return nil, err
	}
	p.ColdStart = serveUp + time.Since(first)
	if version == "" {
		version = "(version unknown)"
	}
	p.About = fmt.Sprintf("Ollama %s, ollama serve (defaults: OLLAMA_NUM_PARALLEL 1), Modelfile FROM the same GGUF, %s", version, strings.Join(params, ", "))
	return p, nil
}

// redactPaths shortens absolute paths to their base name, so the About line of a
// report holds no path of the machine it ran on.
func redactPaths(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if filepath.IsAbs(a) {
			a = filepath.Base(a)
		}
		out[i] = a
	}
	return out
}

func orDuration(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/testenv"
)

// The test binary re-executed with PEERS_FAKE=1 plays the servers: `serve --addr A`
// is a fake embed-stack, `serve` alone a fake ollama (address from OLLAMA_HOST),
// `create` its model registration, `child` a worker that sleeps. Each server starts
// a child and writes its pid to $PEERS_CHILD_PID, so tests can check that Stop ends
// the whole group.
func TestMain(m *testing.M) {
	if testenv.Get("PEERS_FAKE") == "1" {
		os.Exit(fakeMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeMain(args []string) int {
	switch {
	case len(args) > 0 && args[0] == "child":
		time.Sleep(time.Minute)
		return 0
	case len(args) > 0 && args[0] == "create":
		// create NAME -f MODELFILE: record the Modelfile where serve finds it.
		mf, err := os.ReadFile(args[3])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return exitErr(os.WriteFile(filepath.Join(testenv.Get("OLLAMA_MODELS"), "created-"+args[1]), mf, 0o644))
	case len(args) > 0 && (args[0] == "serve" || args[0] == "st-server.py"):
		if testenv.Get("PEERS_FAKE_EXIT") == "1" {
			fmt.Fprintln(os.Stderr, "fake: refusing to start")
			return 3
		}
	default:
		fmt.Fprintln(os.Stderr, "fake: unknown command", args)
		return 2
	}
	child, err := os.StartProcess(os.Args[0], []string{os.Args[0], "child"}, &os.ProcAttr{Env: os.Environ()})
	if err != nil {
		return exitErr(err)
	}
	if err := os.WriteFile(testenv.Get("PEERS_CHILD_PID"), []byte(strconv.Itoa(child.Pid)), 0o644); err != nil {
		return exitErr(err)
	}
	addr := testenv.Get("OLLAMA_HOST")
	flags := map[string]string{}
	for i, a := range args {
		if strings.HasPrefix(a, "--") && i+1 < len(args) {
			flags[a] = args[i+1]
		}
		if a == "--addr" {
			addr = args[i+1]
		}
	}
	var calls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) {
		// The environment ollama was started with, for the test to read.
		env, _ := json.Marshal(os.Environ())
		os.WriteFile(filepath.Join(testenv.Get("HOME"), "env.json"), env, 0o644)
		fmt.Fprint(w, `{"version":"9.9.9"}`)
	})
	var tags atomic.Int64
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, r *http.Request) {
		digest := "" // embed-stack: the model's digest from the fourth call on
		if tags.Add(1) > 3 {
			digest = "sha256:0123"
		}
		fmt.Fprintf(w, `{"models":[{"name":"bench","digest":%q}]}`, digest)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		// server.py's: what it was started with, and the environment for the test.
		threads, _ := strconv.Atoi(flags["--threads"])
		maxSeq, _ := strconv.Atoi(flags["--max-seq-length"])
		json.NewEncoder(w).Encode(map[string]any{"status": "ok", "threads": threads, "max_seq_length": maxSeq,
			"versions": map[string]string{"torch": "9.1", "sentence_transformers": "9.2", "transformers": "9.3", "python": "3.x"},
			"model":    flags["--model"], "env": os.Environ()})
	})
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) {
		if testenv.Get("OLLAMA_MODELS") != "" {
			var req struct{ Model string }
			json.NewDecoder(r.Body).Decode(&req)
			if _, err := os.Stat(filepath.Join(testenv.Get("OLLAMA_MODELS"), "created-"+req.Model)); err != nil {
				http.Error(w, `{"error":"model not found"}`, http.StatusNotFound)
				return
			}
		} else if calls.Add(1) <= 2 { // embed-stack: loading for two calls
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"message":"loading"}}`, http.StatusServiceUnavailable)
			return
		}
		time.Sleep(50 * time.Millisecond) // the model loads on the first request
		fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1,0]}],"usage":{"prompt_tokens":8,"total_tokens":8}}`)
	})
	return exitErr(http.ListenAndServe(addr, mux))
}

func exitErr(err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake:", err)
		return 1
	}
	return 0
}

// fakeEnv makes the fake server's children find what they need.
func fakeEnv(t *testing.T) (childPidFile string) {
	t.Helper()
	childPidFile = filepath.Join(t.TempDir(), "child.pid")
	t.Setenv("PEERS_FAKE", "1")
	t.Setenv("PEERS_CHILD_PID", childPidFile)
	return childPidFile
}

// checkStopped stops p and checks that its child went with it.
func checkStopped(t *testing.T, p *Process, childPidFile string) {
	t.Helper()
	b, err := os.ReadFile(childPidFile)
	if err != nil {
		t.Fatalf("the fake server wrote no child pid: %v", err)
	}
	child, _ := strconv.Atoi(string(b))
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	// The child was reparented when the server died; it must be gone (or a zombie
	// about to be reaped) shortly after.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Kill(child, 0)
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if errors.Is(err, syscall.ESRCH) || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the server's child %d outlived Stop", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEmbedStackStart(t *testing.T) {
	childPid := fakeEnv(t)
	exe, _ := os.Executable()
	p, err := EmbedStack{Bin: exe, Model: "/some/dir/model.gguf", Threads: 3, Args: []string{"--batch-tokens=64"}, ReadyTimeout: 30 * time.Second}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.BaseURL, "http://127.0.0.1:") || !strings.HasSuffix(p.BaseURL, "/v1") || p.Model != "bench" || p.PID <= 0 {
		t.Errorf("process %+v", p)
	}
	// Cold start includes the two 503s and the first 200's 50ms.
	if p.ColdStart < 50*time.Millisecond {
		t.Errorf("cold start %s, want at least the first request's 50ms", p.ColdStart)
	}
	for _, want := range []string{"serve --model model.gguf --addr 127.0.0.1:", "--threads 3 --batch-tokens=64"} {
		if !strings.Contains(p.About, want) {
			t.Errorf("About %q lacks %q", p.About, want)
		}
	}
	if strings.Contains(p.About, "/some/dir") {
		t.Errorf("About %q holds an absolute path", p.About)
	}
	checkStopped(t, p, childPid)
}

// With CacheMiB, serve gets --cache-size and Start returns once /api/tags shows the
// model's digest, from when the cache is in use.
func TestEmbedStackStartCache(t *testing.T) {
	childPid := fakeEnv(t)
	exe, _ := os.Executable()
	p, err := EmbedStack{Bin: exe, Model: "m.gguf", CacheMiB: 8, ReadyTimeout: 30 * time.Second}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.About, " --cache-size 8") {
		t.Errorf("About %q lacks --cache-size 8", p.About)
	}
	resp, err := http.Get(strings.TrimSuffix(p.BaseURL, "/v1") + "/api/tags")
	if err != nil {
		t.Fatal(err)
	}
	var tags struct{ Models []struct{ Digest string } }
	err = json.NewDecoder(resp.Body).Decode(&tags)
	resp.Body.Close()
	if err != nil || len(tags.Models) != 1 || tags.Models[0].Digest != "sha256:0123" {
		t.Errorf("after Start, /api/tags: %+v (%v); want the digest, which the fake gives from its fourth call", tags, err)
	}
	checkStopped(t, p, childPid)
}

// TestEmbedStackStartFails: a server that exits while starting is reported with its
// output, without waiting for the ready timeout.
func TestEmbedStackStartFails(t *testing.T) {
	fakeEnv(t)
	t.Setenv("PEERS_FAKE_EXIT", "1")
	exe, _ := os.Executable()
	start := time.Now()
	_, err := EmbedStack{Bin: exe, Model: "m.gguf", ReadyTimeout: time.Minute}.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "embed-stack exited") || !strings.Contains(err.Error(), "fake: refusing to start") {
		t.Errorf("err %v, want the exit and the server's output", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s to notice the exit", d)
	}
}

func TestOllamaStart(t *testing.T) {
	childPid := fakeEnv(t)
	exe, _ := os.Executable()
	home := filepath.Join(t.TempDir(), "home")
	t.Setenv("OLLAMA_NUM_PARALLEL", "8") // the caller's own settings must not leak in
	p, err := Ollama{Bin: exe, Model: "testdata-model.gguf", Home: home, Threads: 2, NumCtx: 16384, ReadyTimeout: 30 * time.Second}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "embed-stack-bench" || !strings.HasSuffix(p.BaseURL, "/v1") {
		t.Errorf("process %+v", p)
	}
	mf, err := os.ReadFile(filepath.Join(home, "models", "created-embed-stack-bench"))
	if err != nil {
		t.Fatalf("ollama create did not run: %v", err)
	}
	abs, _ := filepath.Abs("testdata-model.gguf")
	if want := "FROM " + abs + "\nPARAMETER num_thread 2\nPARAMETER num_ctx 16384\n"; string(mf) != want {
		t.Errorf("Modelfile:\n%s\nwant:\n%s", mf, want)
	}
	var env []string
	b, err := os.ReadFile(filepath.Join(home, "env.json"))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &env)
	for _, want := range []string{"HOME=" + home, "OLLAMA_MODELS=" + filepath.Join(home, "models"), "OLLAMA_KEEP_ALIVE=-1"} {
		if !contains(env, want) {
			t.Errorf("ollama's environment lacks %s", want)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "OLLAMA_NUM_PARALLEL=") {
			t.Errorf("the caller's %s leaked into ollama's environment", kv)
		}
	}
	if p.ColdStart < 50*time.Millisecond {
		t.Errorf("cold start %s, want at least the first request's 50ms", p.ColdStart)
	}
	if !strings.Contains(p.About, "Ollama 9.9.9") || !strings.Contains(p.About, "num_thread 2, num_ctx 16384") {
		t.Errorf("About %q", p.About)
	}
	checkStopped(t, p, childPid)
}

// TestSentenceTransformersStart: server.py is started on the checkpoint with the
// thread count, 512 tokens and no hub access, and About says what runs from its
// /health.
func TestSentenceTransformersStart(t *testing.T) {
	childPid := fakeEnv(t)
	exe, _ := os.Executable()
	p, err := SentenceTransformers{Python: exe, Script: "st-server.py", Model: "/some/dir/all-MiniLM-L6-v2", Threads: 3, ReadyTimeout: 30 * time.Second}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "all-MiniLM-L6-v2" || !strings.HasPrefix(p.BaseURL, "http://127.0.0.1:") || !strings.HasSuffix(p.BaseURL, "/v1") || p.PID <= 0 {
		t.Errorf("process %+v", p)
	}
	want := "sentence-transformers 9.2, torch 9.1 (CPU), transformers 9.3, Python 3.x: st-server.py on all-MiniLM-L6-v2, torch.set_num_threads(3), max_seq_length 512, one request at a time, one forward pass per request"
	if p.About != want {
		t.Errorf("About\n%q\nwant\n%q", p.About, want)
	}
	resp, err := http.Get(strings.TrimSuffix(p.BaseURL, "/v1") + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Model string
		Env   []string
	}
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h.Model != "/some/dir/all-MiniLM-L6-v2" {
		t.Errorf("--model %q, want the checkpoint folder", h.Model)
	}
	for _, kv := range []string{"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1"} {
		if !contains(h.Env, kv) {
			t.Errorf("the server's environment lacks %s", kv)
		}
	}
	checkStopped(t, p, childPid)

	if _, err := (SentenceTransformers{Python: exe, Script: "st-server.py", Model: "m"}).Start(context.Background()); err == nil || !strings.Contains(err.Error(), "thread count") {
		t.Errorf("no thread count: err %v", err)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/hub/hubtest"
	"github.com/embed-stack/embed-stack/internal/e2e"
)

// officialRepo and officialFile are the Hub repository `make run` serves by default and
// the file its :f16 reference must select (the name Qwen publishes).
const (
	officialRepo = "Qwen/Qwen3-Embedding-0.6B-GGUF"
	officialFile = "Qwen3-Embedding-0.6B-f16.gguf"
)

// fakeOfficialHub serves the official repository's layout with the tiny test model as
// its f16 file (and a different Q8_0 file, so picking the wrong one shows).
func fakeOfficialHub(t *testing.T, model string) (*hubtest.Hub, string, []byte) {
	t.Helper()
	tiny, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	h := hubtest.New(t)
	commit := h.AddRepo(officialRepo, map[string][]byte{
		officialFile:                     tiny,
		"Qwen3-Embedding-0.6B-Q8_0.gguf": append(append([]byte(nil), tiny...), "not this one"...),
		"README.md":                      []byte("# Qwen3-Embedding-0.6B-GGUF\n"),
		"params":                         []byte("{}"),
	})
	return h, commit, tiny
}

// hubEnv is the environment of a process that must download from the Hub at endpoint
// into cache: the test's own, less what would change where the Hub is, plus those.
func hubEnv(endpoint, cache string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
			// A `make test` above us must not hand its jobserver or flags to our make.
			"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MODEL", "ADDR", "EMBED_STACK_THREADS":
			continue
		}
		env = append(env, kv)
	}
	// One llama.cpp thread, as e2e.Serve uses (see there).
	return append(env, "HF_ENDPOINT="+endpoint, "HF_HUB_CACHE="+cache, "EMBED_STACK_THREADS=1")
}

// TestMakeRunDefaultsToTheHub: `make run` with no arguments serves the official GGUF by
// its Hub reference; MODEL=models/tiny.gguf serves the local file, building it first.
func TestMakeRunDefaultsToTheHub(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		e2e.Require(t, "make is not installed")
	}
	root := e2e.RepoRoot(t)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "bin/embed-stack serve --model " + officialRepo + ":f16 --addr 127.0.0.1:8080"},
		{[]string{"MODEL=models/tiny.gguf"}, "bin/embed-stack serve --model models/tiny.gguf --addr 127.0.0.1:8080"},
		{[]string{"MODEL=Qwen/Qwen3-Embedding-0.6B-GGUF/Qwen3-Embedding-0.6B-Q8_0.gguf", "ADDR=0.0.0.0:9000"},
			"bin/embed-stack serve --model Qwen/Qwen3-Embedding-0.6B-GGUF/Qwen3-Embedding-0.6B-Q8_0.gguf --addr 0.0.0.0:9000"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// -n prints the commands without running them (build is phony: always listed).
			cmd := exec.Command("make", append([]string{"-n", "run"}, tt.args...)...)
			cmd.Dir = root
			cmd.Env = hubEnv(hubtest.New(t).URL, t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("make -n run: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if last := lines[len(lines)-1]; last != tt.want {
				t.Errorf("make run would run\n%s\nwant\n%s", last, tt.want)
			}
			if !slices.ContainsFunc(lines, func(l string) bool {
				return strings.HasPrefix(l, "go build ") && strings.Contains(l, " -o bin/embed-stack ")
			}) {
				t.Errorf("make run does not build the binary first:\n%s", out)
			}
		})
	}
}

// TestMakeRunDownloadsFromHub is the README's first command end to end: `make run` with
// HF_ENDPOINT pointing at a fake Hub downloads the official F16 file into the Hugging
// Face cache, logging its progress, and serves embeddings from it that equal those of
// the same model served from a local path.
func TestMakeRunDownloadsFromHub(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		e2e.Require(t, "make is not installed")
	}
	_, model := e2e.Paths(t)
	h, commit, tiny := fakeOfficialHub(t, model)
	cache := t.TempDir()
	addr := e2e.FreeAddr(t)

	cmd := exec.Command("make", "-s", "run", "ADDR="+addr)
	cmd.Dir = e2e.RepoRoot(t)
	cmd.Env = hubEnv(h.URL, cache)
	p := e2e.Start(t, cmd)
	p.WaitReady(t, "http://"+addr, e2e.ReadyTimeout)

	log := p.Out.String()
	for _, re := range []string{
		`msg="downloading model" file=` + officialFile + ` size_mb=`,
		`msg="download progress" file=` + officialFile + ` percent=50 `,
		`msg="download progress" file=` + officialFile + ` percent=100 `,
		`msg="model downloaded" repo=` + officialRepo + ` file=` + officialFile + ` commit=` + commit,
		`msg="warm worker ready"`,
	} {
		if !regexp.MustCompile(regexp.QuoteMeta(re)).MatchString(log) {
			t.Errorf("log lacks %q:\n%s", re, log)
		}
	}
	// The standard cache layout, with the F16 file and nothing else downloaded.
	snap := filepath.Join(cache, "models--Qwen--Qwen3-Embedding-0.6B-GGUF", "snapshots", commit, officialFile)
	got, err := os.ReadFile(snap)
	if err != nil || string(got) != string(tiny) {
		t.Fatalf("snapshot %s: %d bytes, err %v; want the %d bytes served", snap, len(got), err, len(tiny))
	}
	if ref, _ := os.ReadFile(filepath.Join(cache, "models--Qwen--Qwen3-Embedding-0.6B-GGUF", "refs", "main")); string(ref) != commit {
		t.Errorf("refs/main = %q, want %s", ref, commit)
	}
	var cdn []string
	for _, r := range h.Requests() {
		if r.Server == "cdn" && r.Method == "GET" {
			cdn = append(cdn, r.Path)
		}
	}
	if want := []string{"/blobs/" + hubtest.SHA256(tiny)}; !slices.Equal(cdn, want) {
		t.Errorf("CDN downloads %v, want exactly %v (the F16 file, once)", cdn, want)
	}

	texts := []string{"The quick brown fox", "jumps over the lazy dog"}
	body := func() map[string]any {
		return map[string]any{"model": "qwen3-embedding-0.6b", "input": texts, "dimensions": 64}
	}
	fromHub := e2e.Embeddings(t, "http://"+addr, body())
	local := e2e.Embeddings(t, e2e.Serve(t).URL, body())
	for i := range texts {
		if c := e2e.Cosine(fromHub[i], local[i]); c < embedCosine {
			t.Errorf("text %d: cosine %.7f between the downloaded and the local model, want ≥ %v", i, c, embedCosine)
		}
	}
}

// TestEmbedHubProgressBar: on a terminal the download and then the embedding each draw a
// progress bar redrawn in place (the embed command, run under script(1) for a
// pseudo-terminal), and the cached file is reused by a second run without any download.
func TestEmbedHubProgressBar(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		e2e.Require(t, "script (util-linux) is not installed: the terminal test needs a pseudo-terminal")
	}
	bin, model := e2e.Paths(t)
	h, _, _ := fakeOfficialHub(t, model)
	cache, dir := t.TempDir(), t.TempDir()
	in := filepath.Join(dir, "in.txt")
	writeLines(t, in, []string{"one", "two"})
	run := func(out string) string {
		line := fmt.Sprintf("%s embed --model %s:f16 --input %s --output %s", bin, officialRepo, in, out)
		cmd := exec.Command(script, "-q", "-e", "-c", line, "/dev/null")
		cmd.Env = hubEnv(h.URL, cache)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, b)
		}
		return string(b)
	}
	first := run(filepath.Join(dir, "a.jsonl"))
	bar := regexp.MustCompile(`\r` + regexp.QuoteMeta(officialFile) + ` 100% \[=+\] [0-9.]+/[0-9.]+ MB .* done`)
	if !bar.MatchString(first) {
		t.Errorf("no finished progress bar on the terminal:\n%q", first)
	}
	// The job's own bar, after the download's.
	if !regexp.MustCompile(`\r100% \[=+\] 2/2 items +(--|[0-9.]+) items/s +done`).MatchString(first) {
		t.Errorf("no finished embedding progress bar on the terminal:\n%q", first)
	}
	if n := len(readJSONL(t, filepath.Join(dir, "a.jsonl"))); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
	before := len(h.Requests())
	second := run(filepath.Join(dir, "b.jsonl"))
	if strings.Contains(second, "MB/s") || strings.Contains(second, "downloading") {
		t.Errorf("second run downloaded again:\n%q", second)
	}
	for _, r := range h.Requests()[before:] {
		if r.Server == "cdn" {
			t.Errorf("second run fetched %s from the CDN; want the cached file", r.Path)
		}
	}
}

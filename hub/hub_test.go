package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/hub/hubtest"
)

const (
	qwenRepo    = "Qwen/Qwen3-Embedding-0.6B-GGUF"
	defaultFile = "Qwen3-Embedding-0.6B-f16.gguf" // what a reference naming no quantisation selects
	q8File      = "Qwen3-Embedding-0.6B-Q8_0.gguf"
	defaultSize = 4 << 20 // large enough for ten progress steps of several reads each
	q8Size      = 1 << 20
)

// testBytes is deterministic pseudo-random content.
func testBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

var (
	defaultData = testBytes(1, defaultSize)
	q8Data      = testBytes(2, q8Size)
)

// qwenHub is a fake hub holding a repository shaped like the official one.
// It returns the hub and the repository's commit.
func qwenHub(t *testing.T) (*hubtest.Hub, string) {
	f := hubtest.New(t)
	commit := f.AddRepo(qwenRepo, map[string][]byte{
		".gitattributes": []byte("*.gguf filter=lfs diff=lfs merge=lfs -text\n"),
		"README.md":      []byte("# Qwen3-Embedding-0.6B-GGUF\n"),
		"LICENSE":        []byte("Apache License 2.0\n"),
		defaultFile:      defaultData,
		q8File:           q8Data,
	})
	return f, commit
}

// logBuffer is a concurrency-safe sink for slog's JSON handler.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records decodes the JSON log lines whose msg is msg.
func (l *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func testOptions(t *testing.T, f *hubtest.Hub) (Options, *logBuffer) {
	logs := &logBuffer{}
	return Options{
		Endpoint: f.URL,
		CacheDir: t.TempDir(),
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, logs
}

func repoDir(opts Options) string {
	return filepath.Join(opts.CacheDir, "models--Qwen--Qwen3-Embedding-0.6B-GGUF")
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// requestLines renders requests as "server METHOD path [range] [auth]" for exact
// comparison.
func requestLines(reqs []hubtest.Request) []string {
	var out []string
	for _, r := range reqs {
		l := r.Server + " " + r.Method + " " + r.Path
		if r.Range != "" {
			l += " range=" + r.Range
		}
		if r.Auth != "" {
			l += " auth=" + r.Auth
		}
		out = append(out, l)
	}
	return out
}

func TestResolveDownloadsIntoHFCacheLayout(t *testing.T) {
	f, commit := qwenHub(t)
	opts, _ := testOptions(t, f)

	got, err := Resolve(context.Background(), qwenRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	sum := hubtest.SHA256(defaultData)
	dir := repoDir(opts)
	want := filepath.Join(dir, "snapshots", commit, defaultFile)
	if got != want {
		t.Fatalf("path = %s, want %s", got, want)
	}
	if fi, err := os.Lstat(got); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("snapshot file is not a symlink: %v %v", fi, err)
	}
	if target, err := os.Readlink(got); err != nil || target != filepath.Join("..", "..", "blobs", sum) {
		t.Fatalf("symlink target = %q (%v), want ../../blobs/%s", target, err, sum)
	}
	if b := readFile(t, filepath.Join(dir, "blobs", sum)); !bytes.Equal(b, defaultData) {
		t.Fatalf("blob holds %d bytes, sha256 %s; want %d bytes, %s", len(b), hubtest.SHA256(b), len(defaultData), sum)
	}
	if ref := string(readFile(t, filepath.Join(dir, "refs", "main"))); ref != commit {
		t.Fatalf("refs/main = %q, want %q", ref, commit)
	}
	blobs, _ := os.ReadDir(filepath.Join(dir, "blobs"))
	if len(blobs) != 1 || blobs[0].Name() != sum {
		t.Fatalf("blobs/ holds %v, want only %s (no .incomplete left)", blobs, sum)
	}
	if _, err := os.Stat(filepath.Join(opts.CacheDir, ".locks", "models--Qwen--Qwen3-Embedding-0.6B-GGUF", sum+".lock")); err != nil {
		t.Fatalf("lock file missing where huggingface_hub puts it: %v", err)
	}

	// The HEAD and the GET ask for the commit the API named; only the blob travels
	// from the CDN.
	base := "/Qwen/Qwen3-Embedding-0.6B-GGUF/resolve/" + commit + "/" + defaultFile
	wantReqs := []string{
		"hub GET /api/models/Qwen/Qwen3-Embedding-0.6B-GGUF/revision/main",
		"hub HEAD " + base,
		"hub GET " + base,
		"cdn GET /blobs/" + sum,
	}
	if r := requestLines(f.Requests()); !slices.Equal(r, wantReqs) {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(r, "\n"), strings.Join(wantReqs, "\n"))
	}

	// A second call downloads nothing: one API request says main is still the cached
	// commit.
	before := len(f.Requests())
	again, err := Resolve(context.Background(), qwenRepo, opts)
	if err != nil || again != want {
		t.Fatalf("second Resolve = %q, %v; want %q", again, err, want)
	}
	if r := requestLines(f.Requests()[before:]); !slices.Equal(r, wantReqs[:1]) {
		t.Fatalf("second Resolve made requests %q, want only %q", r, wantReqs[:1])
	}
}

func TestResolveSelectsFile(t *testing.T) {
	f, commit := qwenHub(t)
	f.AddRef(qwenRepo, "v1.0")
	f.AddRef(qwenRepo, "refs/pr/1")
	commits := map[string]string{
		"acme/only-q4-GGUF": f.AddRepo("acme/only-q4-GGUF", map[string][]byte{"model-Q4_K_M.gguf": q8Data, "README.md": []byte("x")}),
		"acme/many-GGUF":    f.AddRepo("acme/many-GGUF", map[string][]byte{"m-Q4_K_M.gguf": q8Data, "m-Q8_0.gguf": q8Data, "m.Q5_0.gguf": q8Data}),
		"acme/twins-GGUF":   f.AddRepo("acme/twins-GGUF", map[string][]byte{"a/m-F16.gguf": q8Data, "b/m-F16.gguf": q8Data}),
	}
	f.AddRepo("acme/safetensors", map[string][]byte{"model.safetensors": q8Data})
	snap := func(owner, name, commit, file string) string {
		return filepath.Join("models--"+owner+"--"+name, "snapshots", commit, filepath.FromSlash(file))
	}

	tests := []struct {
		ref      string
		wantPath string // relative to the cache
		wantRef  [2]string
		wantErr  error
		wantMsg  []string
	}{
		{ref: qwenRepo + ":q8_0", wantPath: snap("Qwen", "Qwen3-Embedding-0.6B-GGUF", commit, q8File)},
		{ref: qwenRepo + ":F16", wantPath: snap("Qwen", "Qwen3-Embedding-0.6B-GGUF", commit, defaultFile)},
		{ref: qwenRepo + "/" + q8File, wantPath: snap("Qwen", "Qwen3-Embedding-0.6B-GGUF", commit, q8File)},
		{ref: qwenRepo + ":q8_0@v1.0", wantPath: snap("Qwen", "Qwen3-Embedding-0.6B-GGUF", commit, q8File), wantRef: [2]string{"v1.0", commit}},
		{ref: qwenRepo + "@v1.0:Q8_0", wantPath: snap("Qwen", "Qwen3-Embedding-0.6B-GGUF", commit, q8File), wantRef: [2]string{"v1.0", commit}},
		{ref: qwenRepo + "@refs/pr/1", wantPath: snap("Qwen", "Qwen3-Embedding-0.6B-GGUF", commit, defaultFile), wantRef: [2]string{"refs/pr/1", commit}},
		{ref: qwenRepo + "@" + commit, wantPath: snap("Qwen", "Qwen3-Embedding-0.6B-GGUF", commit, defaultFile)},
		{ref: "acme/only-q4-GGUF", wantPath: snap("acme", "only-q4-GGUF", commits["acme/only-q4-GGUF"], "model-Q4_K_M.gguf")},
		{ref: "acme/twins-GGUF/b/m-F16.gguf", wantPath: snap("acme", "twins-GGUF", commits["acme/twins-GGUF"], "b/m-F16.gguf")},
		{ref: "acme/many-GGUF:q5_0", wantPath: snap("acme", "many-GGUF", commits["acme/many-GGUF"], "m.Q5_0.gguf")},
		{ref: "acme/many-GGUF", wantErr: ErrAmbiguous, wantMsg: []string{
			"acme/many-GGUF at revision main has several .gguf files and none is F16: m-Q4_K_M.gguf, m-Q8_0.gguf, m.Q5_0.gguf",
			"acme/many-GGUF:QUANT", "acme/many-GGUF/FILE.gguf"}},
		{ref: "acme/twins-GGUF", wantErr: ErrAmbiguous, wantMsg: []string{"several F16 files", "a/m-F16.gguf, b/m-F16.gguf"}},
		{ref: qwenRepo + ":Q4_K_M", wantErr: ErrNotFound, wantMsg: []string{
			`no .gguf file in Qwen/Qwen3-Embedding-0.6B-GGUF at revision main matches quantisation "Q4_K_M"`,
			"Qwen3-Embedding-0.6B-Q8_0.gguf, Qwen3-Embedding-0.6B-f16.gguf"}},
		{ref: qwenRepo + "/Qwen3-Embedding-0.6B-Q4_0.gguf", wantErr: ErrNotFound, wantMsg: []string{
			`file "Qwen3-Embedding-0.6B-Q4_0.gguf" not found`, "Qwen3-Embedding-0.6B-Q8_0.gguf, Qwen3-Embedding-0.6B-f16.gguf"}},
		{ref: "acme/safetensors", wantErr: ErrNotFound, wantMsg: []string{"acme/safetensors at revision main has no .gguf files"}},
		{ref: qwenRepo + "@nope", wantErr: ErrNotFound, wantMsg: []string{`revision "nope" not found in Qwen/Qwen3-Embedding-0.6B-GGUF`}},
		{ref: "acme/missing", wantErr: ErrNotFound, wantMsg: []string{"repository acme/missing not found at " + f.URL, "set HF_TOKEN"}},
	}
	opts, _ := testOptions(t, f) // one cache for all: later cases reuse earlier blobs
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := Resolve(context.Background(), tt.ref, opts)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want kind %v", err, tt.wantErr)
				}
				for _, m := range tt.wantMsg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q lacks %q", err, m)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(opts.CacheDir, tt.wantPath); got != want {
				t.Fatalf("path = %s, want %s", got, want)
			}
			wantData := q8Data // also the content of every acme file
			if strings.HasSuffix(got, defaultFile) {
				wantData = defaultData
			}
			if b := readFile(t, got); !bytes.Equal(b, wantData) {
				t.Fatalf("content sha256 %s, want %s", hubtest.SHA256(b), hubtest.SHA256(wantData))
			}
			if tt.wantRef[0] != "" {
				p := filepath.Join(repoDir(opts), "refs", filepath.FromSlash(tt.wantRef[0]))
				if got := string(readFile(t, p)); got != tt.wantRef[1] {
					t.Fatalf("refs/%s = %q, want %q", tt.wantRef[0], got, tt.wantRef[1])
				}
			}
		})
	}
	// The revision is escaped whole in the API path, as huggingface_hub does.
	found := false
	for _, r := range requestLines(f.Requests()) {
		found = found || r == "hub GET /api/models/Qwen/Qwen3-Embedding-0.6B-GGUF/revision/refs%2Fpr%2F1"
	}
	if !found {
		t.Errorf("no API request with the escaped revision refs%%2Fpr%%2F1")
	}
	// A commit revision writes no ref named after the commit.
	if _, err := os.Stat(filepath.Join(repoDir(opts), "refs", commit)); !os.IsNotExist(err) {
		t.Errorf("refs/<commit> exists (%v); huggingface_hub writes none", err)
	}
}

func TestResolveResumesAcrossCalls(t *testing.T) {
	f, commit := qwenHub(t)
	opts, logs := testOptions(t, f)
	half := int64(defaultSize / 2)
	f.PlanCDN(hubtest.CDNFault{Cut: half}, hubtest.CDNFault{Status: 503})

	_, err := Resolve(context.Background(), qwenRepo, opts)
	if !errors.Is(err, ErrNetwork) {
		t.Fatalf("first Resolve err = %v, want ErrNetwork", err)
	}
	for _, m := range []string{"the download server failed to serve " + defaultFile, "HTTP 503", "run again later to resume", "HF_HUB_OFFLINE=1"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q lacks %q", err, m)
		}
	}
	sum := hubtest.SHA256(defaultData)
	incomplete := filepath.Join(repoDir(opts), "blobs", sum+".incomplete")
	if b := readFile(t, incomplete); int64(len(b)) != half || !bytes.Equal(b, defaultData[:half]) {
		t.Fatalf(".incomplete holds %d bytes, want the first %d of the file", len(b), half)
	}
	if _, err := os.Lstat(filepath.Join(repoDir(opts), "snapshots")); !os.IsNotExist(err) {
		t.Fatalf("a snapshot exists after a failed download: %v", err)
	}
	if w := logs.records(t, "download interrupted; resuming"); len(w) != 1 || w[0]["at_mb"] != 2.1 {
		t.Fatalf("resume warnings = %v, want one at 2.1 MB", w)
	}

	before, served := len(f.Requests()), f.CDNBytes()
	got, err := Resolve(context.Background(), qwenRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	if b := readFile(t, got); hubtest.SHA256(b) != sum {
		t.Fatalf("resumed file sha256 %s, want %s", hubtest.SHA256(b), sum)
	}
	var cdn []string
	for _, r := range requestLines(f.Requests()[before:]) {
		if strings.HasPrefix(r, "cdn") || strings.HasPrefix(r, "hub GET /Qwen") {
			cdn = append(cdn, r)
		}
	}
	range_ := " range=bytes=2097152-"
	want := []string{"hub GET /Qwen/Qwen3-Embedding-0.6B-GGUF/resolve/" + commit + "/" + defaultFile + range_, "cdn GET /blobs/" + sum + range_}
	if !slices.Equal(cdn, want) {
		t.Fatalf("download requests %q, want %q", cdn, want)
	}
	if n := f.CDNBytes() - served; n != defaultSize-half {
		t.Fatalf("CDN served %d bytes on resume, want the missing %d", n, defaultSize-half)
	}
}

func TestResolveReconnectsWithinOneCall(t *testing.T) {
	f, _ := qwenHub(t)
	opts, logs := testOptions(t, f)
	third := int64(defaultSize / 3)
	f.PlanCDN(hubtest.CDNFault{Cut: third}, hubtest.CDNFault{Cut: third})

	got, err := Resolve(context.Background(), qwenRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	if b := readFile(t, got); !bytes.Equal(b, defaultData) {
		t.Fatalf("sha256 %s, want %s", hubtest.SHA256(b), hubtest.SHA256(defaultData))
	}
	var ranges []string
	for _, r := range f.Requests() {
		if r.Server == "cdn" {
			ranges = append(ranges, r.Range)
		}
	}
	if want := []string{"", "bytes=1398101-", "bytes=2796202-"}; !slices.Equal(ranges, want) {
		t.Fatalf("CDN ranges %q, want %q", ranges, want)
	}
	if n := len(logs.records(t, "download interrupted; resuming")); n != 2 {
		t.Fatalf("%d resume warnings, want 2", n)
	}
}

func TestResolveServerIgnoringRangeStartsOver(t *testing.T) {
	f, _ := qwenHub(t)
	opts, logs := testOptions(t, f)
	half := int64(defaultSize / 2)
	f.PlanCDN(hubtest.CDNFault{Cut: half}, hubtest.CDNFault{Status: 500})
	if _, err := Resolve(context.Background(), qwenRepo, opts); !errors.Is(err, ErrNetwork) {
		t.Fatalf("err = %v, want ErrNetwork", err)
	}

	served := f.CDNBytes()
	f.PlanCDN(hubtest.CDNFault{IgnoreRange: true})
	got, err := Resolve(context.Background(), qwenRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	b := readFile(t, got)
	if len(b) != defaultSize || !bytes.Equal(b, defaultData) {
		t.Fatalf("file has %d bytes, sha256 %s; want %d, %s (not the half appended to the whole)", len(b), hubtest.SHA256(b), defaultSize, hubtest.SHA256(defaultData))
	}
	reqs := f.Requests()
	last := reqs[len(reqs)-1]
	if last.Server != "cdn" || last.Range != "bytes=2097152-" {
		t.Fatalf("last request %+v, want a CDN GET with Range bytes=2097152-", last)
	}
	if n := f.CDNBytes() - served; n != defaultSize {
		t.Fatalf("CDN served %d bytes, want the whole %d", n, defaultSize)
	}
	if n := len(logs.records(t, "server ignored the resume request; downloading from the start")); n != 1 {
		t.Fatalf("%d 'ignored the resume' warnings, want 1", n)
	}
}

func TestResolveStalledDownloadResumes(t *testing.T) {
	f, _ := qwenHub(t)
	opts, logs := testOptions(t, f)
	opts.StallTimeout = 300 * time.Millisecond
	f.PlanCDN(hubtest.CDNFault{Cut: defaultSize / 4, Stall: true})

	got, err := Resolve(context.Background(), qwenRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	if b := readFile(t, got); !bytes.Equal(b, defaultData) {
		t.Fatalf("sha256 %s, want %s", hubtest.SHA256(b), hubtest.SHA256(defaultData))
	}
	w := logs.records(t, "download interrupted; resuming")
	if len(w) != 1 || w[0]["error"] != "no data received for 300ms" {
		t.Fatalf("warnings %v, want one saying no data received for 300ms", w)
	}
}

func TestResolveRefusesChecksumMismatch(t *testing.T) {
	f, _ := qwenHub(t)
	f.PlanCDN(hubtest.CDNFault{Corrupt: true})
	opts, _ := testOptions(t, f)

	_, err := Resolve(context.Background(), qwenRepo, opts)
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("err = %v, want ErrChecksum", err)
	}
	bad := append([]byte(nil), defaultData...)
	bad[len(bad)/2] ^= 0xff
	for _, m := range []string{"downloaded " + defaultFile + " has sha256 " + hubtest.SHA256(bad) + " but the hub says " + hubtest.SHA256(defaultData), "was deleted, run again"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q lacks %q", err, m)
		}
	}
	blobs, _ := os.ReadDir(filepath.Join(repoDir(opts), "blobs"))
	if len(blobs) != 0 {
		t.Fatalf("blobs/ holds %v after a checksum failure, want nothing", blobs)
	}
	if _, err := os.Lstat(filepath.Join(repoDir(opts), "snapshots")); !os.IsNotExist(err) {
		t.Fatalf("snapshot created for a corrupt download: %v", err)
	}
}

func TestResolveWeakETag(t *testing.T) {
	f, commit := qwenHub(t)
	f.SetHeader("X-Linked-Etag", `W/"`+hubtest.SHA256(q8Data)+`"`)
	opts, _ := testOptions(t, f)
	got, err := Resolve(context.Background(), qwenRepo+":q8_0", opts)
	if err != nil {
		t.Fatal(err)
	}
	sum := hubtest.SHA256(q8Data)
	if target, _ := os.Readlink(got); target != filepath.Join("..", "..", "blobs", sum) {
		t.Fatalf("symlink target %q, want ../../blobs/%s (W/ and quotes stripped)", target, sum)
	}
	if got != filepath.Join(repoDir(opts), "snapshots", commit, q8File) {
		t.Fatalf("path %s", got)
	}
}

func TestResolveRefusesUnsafeHeaders(t *testing.T) {
	tests := []struct {
		header, value, want string
	}{
		{"X-Repo-Commit", "../../../../tmp/x", `no valid X-Repo-Commit header ("../../../../tmp/x")`},
		{"X-Linked-Etag", `"../../evil"`, `no usable ETag ("../../evil")`},
		{"X-Linked-Size", "-5", `invalid size "-5"`},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			f, _ := qwenHub(t)
			f.SetHeader(tt.header, tt.value)
			opts, _ := testOptions(t, f)
			_, err := Resolve(context.Background(), qwenRepo, opts)
			if !errors.Is(err, ErrHub) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrHub containing %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(repoDir(opts), "blobs")); !os.IsNotExist(err) {
				t.Fatalf("blobs/ created despite the bad header: %v", err)
			}
		})
	}
}

func TestResolveTokenGoesToHubOnly(t *testing.T) {
	f, _ := qwenHub(t)
	f.Gate(qwenRepo, "hf_secret")
	opts, _ := testOptions(t, f)
	opts.Token = "hf_secret"

	if _, err := Resolve(context.Background(), qwenRepo, opts); err != nil {
		t.Fatal(err)
	}
	var hub, cdn int
	for _, r := range f.Requests() {
		switch {
		case r.Server == "hub" && r.Auth != "Bearer hf_secret":
			t.Errorf("hub request %s %s without the token (Authorization %q)", r.Method, r.Path, r.Auth)
		case r.Server == "cdn" && r.Auth != "":
			t.Errorf("token leaked to the CDN: %s %s Authorization %q", r.Method, r.Path, r.Auth)
		}
		if r.Server == "hub" {
			hub++
		} else {
			cdn++
		}
	}
	if hub != 3 || cdn != 1 {
		t.Fatalf("%d hub and %d CDN requests, want 3 and 1", hub, cdn)
	}
}

func TestResolveAccessErrors(t *testing.T) {
	tests := []struct {
		name    string
		token   string
		apiFail int
		ref     string
		kind    error
		want    []string
	}{
		{name: "gated without token", ref: qwenRepo, kind: ErrUnauthorized, want: []string{
			"Qwen/Qwen3-Embedding-0.6B-GGUF is a gated repository (HTTP 401: Access to model", "accept its conditions at", "set HF_TOKEN"}},
		{name: "gated wrong token", token: "hf_wrong", ref: qwenRepo, kind: ErrUnauthorized, want: []string{
			"(HTTP 403:", "the token sent (HF_TOKEN) was refused"}},
		{name: "missing repo anonymous", ref: "nobody/nothing-GGUF", kind: ErrNotFound, want: []string{
			"repository nobody/nothing-GGUF not found", "HTTP 401: Repository not found", "if it is private, set HF_TOKEN"}},
		{name: "hub error", apiFail: 500, ref: qwenRepo, kind: ErrNetwork, want: []string{
			"the hub failed to serve Qwen/Qwen3-Embedding-0.6B-GGUF (HTTP 500: Internal Error); retry later", "set HF_HUB_OFFLINE=1"}},
		{name: "rate limited", apiFail: 429, ref: qwenRepo, kind: ErrNetwork, want: []string{"rate-limiting", "set HF_TOKEN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := qwenHub(t)
			f.Gate(qwenRepo, "hf_right")
			f.FailAPI(tt.apiFail)
			opts, _ := testOptions(t, f)
			opts.Token = tt.token
			_, err := Resolve(context.Background(), tt.ref, opts)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want kind %v", err, tt.kind)
			}
			for _, m := range tt.want {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q lacks %q", err, m)
				}
			}
		})
	}
}

// deadEndpoint is the URL of a server that no longer listens.
func deadEndpoint() string {
	s := httptest.NewServer(nil)
	u := s.URL
	s.Close()
	return u
}

func TestResolveOfflineAndUnreachable(t *testing.T) {
	f, commit := qwenHub(t)
	opts, _ := testOptions(t, f)
	primed, err := Resolve(context.Background(), qwenRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()

	tests := []struct {
		name     string
		offline  bool
		cacheDir string
		ref      string
		want     string
		kind     error
		msg      []string
		warned   bool
	}{
		{name: "offline hit", offline: true, ref: qwenRepo, want: primed},
		{name: "offline hit by tag", offline: true, ref: qwenRepo + ":F16", want: primed},
		{name: "offline hit by commit", offline: true, ref: qwenRepo + "@" + commit, want: primed},
		{name: "offline miss", offline: true, cacheDir: empty, ref: qwenRepo, kind: ErrNotCached, msg: []string{
			"Qwen/Qwen3-Embedding-0.6B-GGUF (revision main) is not in the Hugging Face cache at " + empty,
			"offline mode is on (HF_HUB_OFFLINE=1): unset HF_HUB_OFFLINE and run once with network access to download it"}},
		{name: "offline other quant", offline: true, ref: qwenRepo + ":q8_0", kind: ErrNotCached, msg: []string{
			"cached .gguf files of commit " + commit + ": " + defaultFile, "HF_HUB_OFFLINE"}},
		{name: "offline other branch", offline: true, ref: qwenRepo + "@dev", kind: ErrNotCached, msg: []string{"(revision dev) is not in the Hugging Face cache"}},
		{name: "unreachable falls back", ref: qwenRepo, want: primed, warned: true},
		{name: "unreachable miss", cacheDir: empty, ref: qwenRepo, kind: ErrNetwork, msg: []string{
			"cannot reach the hub at http://127.0.0.1:", "to list the files of Qwen/Qwen3-Embedding-0.6B-GGUF", "set HF_HUB_OFFLINE=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.Requests())
			o, logs := testOptions(t, f)
			o.CacheDir = opts.CacheDir
			if tt.cacheDir != "" {
				o.CacheDir = tt.cacheDir
			}
			o.Offline = tt.offline
			o.Endpoint = deadEndpoint()
			got, err := Resolve(context.Background(), tt.ref, o)
			if tt.kind != nil {
				if !errors.Is(err, tt.kind) {
					t.Fatalf("err = %v, want kind %v", err, tt.kind)
				}
				for _, m := range tt.msg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q lacks %q", err, m)
					}
				}
			} else if err != nil || got != tt.want {
				t.Fatalf("Resolve = %q, %v; want %q", got, err, tt.want)
			}
			if n := len(f.Requests()) - before; n != 0 {
				t.Fatalf("%d requests reached the live fake hub", n)
			}
			if w := logs.records(t, "hub unreachable; using the cached model"); (len(w) == 1) != tt.warned || len(w) > 1 {
				t.Fatalf("fallback warnings %v, want warned=%v", w, tt.warned)
			}
		})
	}
}

func TestResolveLocalPaths(t *testing.T) {
	f, _ := qwenHub(t)
	opts, _ := testOptions(t, f)
	dir := t.TempDir()
	file := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(file, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ref  string
		want string
		msg  []string
	}{
		{ref: file, want: file},
		{ref: dir, msg: []string{"model " + dir + " is a directory", "pass the .gguf file inside it"}},
		{ref: "models/missing.gguf", msg: []string{"model file models/missing.gguf does not exist"}},
		{ref: "./missing.gguf", msg: []string{"model file ./missing.gguf does not exist"}},
		{ref: "Qwen3-Embedding-0.6B", msg: []string{"model file Qwen3-Embedding-0.6B does not exist (a Hugging Face reference looks like owner/name[:QUANT][@REVISION]"}},
		{ref: "Qwen/Qwen3:Q8_0:f16", msg: []string{`neither an existing file nor a valid Hugging Face reference: invalid quantisation "Q8_0:f16"`}},
		{ref: "  ", msg: []string{"no model given"}},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := Resolve(context.Background(), tt.ref, opts)
			if tt.msg == nil {
				if err != nil || got != tt.want {
					t.Fatalf("Resolve = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Resolve = %q, want an error", got)
			}
			for _, m := range tt.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q lacks %q", err, m)
				}
			}
		})
	}
	if n := len(f.Requests()); n != 0 {
		t.Fatalf("local paths made %d hub requests", n)
	}
}

// gateLogger signals on a channel when a record with the given message is logged.
type gateLogger struct {
	slog.Handler
	msg string
	ch  chan struct{}
}

func (g gateLogger) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == g.msg {
		g.ch <- struct{}{}
	}
	return g.Handler.Handle(ctx, r)
}

func TestResolveConcurrentCallsDownloadOnce(t *testing.T) {
	f, _ := qwenHub(t)
	opts, _ := testOptions(t, f)
	arrived, release := f.HoldCDN()
	waiting := make(chan struct{}, 1)
	opts.Logger = slog.New(gateLogger{Handler: slog.NewTextHandler(io.Discard, nil), msg: "waiting for another download of the same file to finish", ch: waiting})

	paths := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	run := func(i int) {
		wg.Go(func() { paths[i], errs[i] = Resolve(context.Background(), qwenRepo, opts) })
	}
	await := func(ch <-chan struct{}, what string) {
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting until %s", what)
		}
	}
	run(0)
	await(arrived, "the first call downloads (holding the lock)")
	run(1)
	await(waiting, "the second call waits on the lock")
	release()
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
	}
	if paths[0] != paths[1] {
		t.Fatalf("paths differ: %s, %s", paths[0], paths[1])
	}
	if b := readFile(t, paths[1]); !bytes.Equal(b, defaultData) {
		t.Fatal("content differs")
	}
	var cdn int
	for _, r := range f.Requests() {
		if r.Server == "cdn" {
			cdn++
		}
	}
	if cdn != 1 {
		t.Fatalf("%d CDN downloads, want 1", cdn)
	}
}

func TestResolveProgress(t *testing.T) {
	t.Run("log lines without a terminal", func(t *testing.T) {
		f, commit := qwenHub(t)
		opts, logs := testOptions(t, f)
		opts.Progress = &bytes.Buffer{} // ignored: not a terminal
		if _, err := Resolve(context.Background(), qwenRepo, opts); err != nil {
			t.Fatal(err)
		}
		if b := opts.Progress.(*bytes.Buffer); b.Len() != 0 {
			t.Fatalf("progress writer got %q without a terminal", b)
		}
		var pct []float64
		for _, r := range logs.records(t, "download progress") {
			pct = append(pct, r["percent"].(float64))
			if r["file"] != defaultFile || r["size_mb"] != 4.2 {
				t.Fatalf("progress line %v", r)
			}
		}
		if want := []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}; !slices.Equal(pct, want) {
			t.Fatalf("progress percents %v, want %v", pct, want)
		}
		if s := logs.records(t, "downloading model"); len(s) != 1 || s[0]["size_mb"] != 4.2 {
			t.Fatalf("start lines %v", s)
		}
		if d := logs.records(t, "model downloaded"); len(d) != 1 || d[0]["size_mb"] != 4.2 || d[0]["commit"] != commit {
			t.Fatalf("completion lines %v", d)
		}
	})
	t.Run("bar on a terminal", func(t *testing.T) {
		f, _ := qwenHub(t)
		opts, logs := testOptions(t, f)
		var bar bytes.Buffer
		opts.Progress, opts.IsTerminal = &bar, true
		if _, err := Resolve(context.Background(), qwenRepo, opts); err != nil {
			t.Fatal(err)
		}
		out := bar.String()
		if !strings.HasPrefix(out, "\r"+defaultFile+"   0% [>                       ] 0.0/4.2 MB") {
			t.Fatalf("bar starts %q", out[:min(len(out), 80)])
		}
		if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
			t.Fatalf("bar output must be one line ending in a newline: %q", out)
		}
		lastDraw := out[strings.LastIndex(out, "\r")+1:]
		if !strings.HasPrefix(lastDraw, defaultFile+" 100% [========================] 4.2/4.2 MB") || !strings.Contains(lastDraw, "MB/s  done") {
			t.Fatalf("final bar %q", lastDraw)
		}
		if n := len(logs.records(t, "download progress")); n != 0 {
			t.Fatalf("%d progress log lines on a terminal, want 0", n)
		}
	})
}

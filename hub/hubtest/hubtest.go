// Package hubtest serves a fake Hugging Face Hub for tests of programs that download
// models through package hub, from any package (the real binary included: point
// HF_ENDPOINT at Hub.URL). It answers as the real Hub does for what a download needs:
//
//   - GET /api/models/{owner}/{name}/revision/{rev}: the commit ("sha") and the file
//     list ("siblings");
//   - HEAD and GET /{owner}/{name}/resolve/{rev}/{file}: for a .gguf (an LFS file) a 302
//     to a CDN on another host, with X-Repo-Commit, X-Linked-Etag (the sha256, quoted)
//     and X-Linked-Size; 401 with X-Error-Code RepoNotFound for an unknown repository
//     asked anonymously, 404 EntryNotFound for an unknown file;
//   - the CDN: the bytes, honouring "Range: bytes=N-" with 206 and Content-Range.
//
// Package hub's own tests use a richer fake (dropped connections, stalls, gated
// repositories); this one is the shared, well-behaved Hub.
//
// It knows nothing of GGUF contents: a file is bytes.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Hub is a running fake Hub and its CDN. Safe for concurrent use.
type Hub struct {
	// URL is the Hub's base URL, for HF_ENDPOINT.
	URL string

	hub, cdn *httptest.Server

	mu       sync.Mutex // guards the fields below
	repos    map[string]*repo
	blobs    map[string][]byte // sha256 → content
	requests []Request
}

type repo struct {
	commit string
	files  map[string][]byte
}

// Request is one request the Hub or the CDN received.
type Request struct {
	// Server is "hub" or "cdn".
	Server, Method, Path, Range string
}

// New starts a Hub (and its CDN) that the test's cleanup stops.
func New(t testing.TB) *Hub {
	t.Helper()
	h := &Hub{repos: map[string]*repo{}, blobs: map[string][]byte{}}
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.URL = h.hub.URL
	t.Cleanup(func() {
		h.cdn.Close()
		h.hub.Close()
	})
	return h
}

// AddRepo adds (or replaces) repository id ("owner/name") holding files on branch
// main, and returns its commit, derived from the id and the file names.
func (h *Hub) AddRepo(id string, files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	sum := sha1.Sum([]byte(id + "\x00" + strings.Join(names, "\x00")))
	r := &repo{commit: hex.EncodeToString(sum[:]), files: files}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repos[id] = r
	for n, d := range files {
		if isLFS(n) {
			h.blobs[SHA256(d)] = d
		}
	}
	return r.commit
}

// Requests returns the requests received so far, in order.
func (h *Hub) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// SHA256 is the hex sha256 of b: the ETag the Hub gives an LFS file.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func isLFS(name string) bool { return strings.HasSuffix(strings.ToLower(name), ".gguf") }

func (h *Hub) record(server string, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, Request{Server: server, Method: r.Method, Path: r.URL.EscapedPath(), Range: r.Header.Get("Range")})
	h.mu.Unlock()
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	h.record("hub", r)
	var segs []string
	for _, s := range strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/") {
		u, err := url.PathUnescape(s)
		if err != nil {
			http.Error(w, "bad path", http.StatusBadRequest)
			return
		}
		segs = append(segs, u)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case len(segs) == 6 && segs[0] == "api" && segs[1] == "models" && segs[4] == "revision" && r.Method == http.MethodGet:
		id := segs[2] + "/" + segs[3]
		rp := h.repos[id]
		if rp == nil {
			hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
			return
		}
		if segs[5] != "main" && segs[5] != rp.commit {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+segs[5])
			return
		}
		names := make([]string, 0, len(rp.files))
		for n := range rp.files {
			names = append(names, n)
		}
		sort.Strings(names)
		siblings := make([]map[string]string, len(names))
		for i, n := range names {
			siblings[i] = map[string]string{"rfilename": n}
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "modelId": id, "sha": rp.commit, "private": false, "siblings": siblings})
	case len(segs) >= 5 && segs[2] == "resolve" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		id := segs[0] + "/" + segs[1]
		rp := h.repos[id]
		if rp == nil {
			hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
			return
		}
		if segs[3] != "main" && segs[3] != rp.commit {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+segs[3])
			return
		}
		name := strings.Join(segs[4:], "/")
		data, ok := rp.files[name]
		if !ok {
			hubError(w, http.StatusNotFound, "EntryNotFound", name+" does not exist on \""+segs[3]+"\"")
			return
		}
		w.Header().Set("X-Repo-Commit", rp.commit)
		if isLFS(name) {
			sum := SHA256(data)
			w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
			w.Header().Set("Location", h.cdn.URL+"/blobs/"+sum+"?X-Amz-Signature=fake")
			w.WriteHeader(http.StatusFound)
			return
		}
		w.Header().Set("ETag", fmt.Sprintf(`"%x"`, sha1.Sum(data)))
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			w.Write(data)
		}
	default:
		hubError(w, http.StatusNotFound, "", "Sorry, we can't find the page you are looking for.")
	}
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.record("cdn", r)
	sum := strings.TrimPrefix(r.URL.Path, "/blobs/")
	h.mu.Lock()
	data, ok := h.blobs[sum]
	h.mu.Unlock()
	if !ok {
		http.Error(w, "NoSuchKey", http.StatusNotFound)
		return
	}
	w.Header().Set("Accept-Ranges", "bytes")
	start, status := 0, http.StatusOK
	if rng := r.Header.Get("Range"); rng != "" {
		from, ok := strings.CutPrefix(rng, "bytes=")
		n, err := strconv.Atoi(strings.TrimSuffix(from, "-"))
		if !ok || err != nil || !strings.HasSuffix(from, "-") || n < 0 {
			http.Error(w, "unsupported range", http.StatusBadRequest)
			return
		}
		if n >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, status = n, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(data)-1, len(data)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)-start))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(data[start:])
	}
}

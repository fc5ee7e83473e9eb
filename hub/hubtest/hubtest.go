// Package hubtest serves a fake Hugging Face Hub for tests of programs that download
// models through package hub, from any package (the real binary included: point
// HF_ENDPOINT at Hub.URL), and for package hub's own tests. It answers as the real Hub
// does, as huggingface_hub sees it:
//
//   - GET /api/models/{owner}/{name}/revision/{rev}: the commit ("sha") and the file
//     list ("siblings");
//   - HEAD and GET /{owner}/{name}/resolve/{rev}/{file}: for a .gguf (an LFS file) a 302
//     to a CDN on another host, with X-Repo-Commit, X-Linked-Etag (the sha256, quoted)
//     and X-Linked-Size, while the redirect's own ETag names the LFS pointer file; for
//     other files the bytes, with the git blob id as ETag;
//   - the Hub's errors, named in X-Error-Code: 401 RepoNotFound for an unknown repository
//     asked anonymously (404 when a token was sent), 401 or 403 GatedRepo for a gated one
//     without its token, 404 RevisionNotFound and EntryNotFound;
//   - the CDN: the bytes, honouring "Range: bytes=N-" with 206 and Content-Range, under
//     an ETag of its own that clients must not mistake for the sha256.
//
// By default it is a well-behaved Hub. A test can make it misbehave: the CDN drops,
// stalls, fails, corrupts or ignores Range request by request (PlanCDN), the API fails
// (FailAPI), the resolve answers carry chosen headers (SetHeader), and the CDN holds
// requests until released (HoldCDN).
//
// It knows nothing of GGUF contents, and does not import package hub, so that hub's own
// tests can use it: a file is bytes.
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
	"time"
)

// Hub is a running fake Hub and its CDN. Safe for concurrent use.
type Hub struct {
	// URL is the Hub's base URL, for HF_ENDPOINT.
	URL string

	hub, cdn *httptest.Server

	mu       sync.Mutex // guards the fields below
	repos    map[string]*repo
	blobs    map[string][]byte // sha256 → content, as the CDN stores it
	requests []Request
	plan     []CDNFault // consumed one per CDN request
	apiFail  int
	headers  map[string]string
	cdnBytes int64
	// gate, while open, holds each CDN request, which first tells arrived.
	gate    chan struct{}
	arrived chan struct{}
	release func()
}

type repo struct {
	commit string
	refs   map[string]string // branch or tag → commit
	files  map[string][]byte
	token  string // when gated: the bearer token required
}

// Request is one request the Hub or the CDN received.
type Request struct {
	// Server is "hub" or "cdn".
	Server, Method, Path, Range string
	// Auth is the Authorization header, so a test can check a token reaches the Hub
	// and never the CDN.
	Auth string
}

// CDNFault is how the CDN misbehaves in answering one request. The zero value answers
// correctly.
type CDNFault struct {
	// Cut, when positive, sends at most this many body bytes and then drops the
	// connection (or stalls, with Stall).
	Cut int64
	// Stall hangs after the Cut bytes instead of dropping the connection, until the
	// client gives up.
	Stall bool
	// Status, when set, answers with this status and no file.
	Status int
	// IgnoreRange answers 200 with the whole file whatever Range asked for, as some
	// proxies do.
	IgnoreRange bool
	// Corrupt flips a byte in the middle of the file, so it no longer has its sha256.
	Corrupt bool
}

// New starts a Hub (and its CDN) that the test's cleanup stops.
func New(t testing.TB) *Hub {
	t.Helper()
	h := &Hub{repos: map[string]*repo{}, blobs: map[string][]byte{}}
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.URL = h.hub.URL
	t.Cleanup(func() {
		// A held CDN request would block Close forever.
		h.mu.Lock()
		release := h.release
		h.mu.Unlock()
		if release != nil {
			release()
		}
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
	r.refs = map[string]string{"main": r.commit}
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

// AddRef makes ref (a branch, a tag or "refs/pr/N") of repository id name the same
// commit as main. It panics if AddRepo has not added id.
func (h *Hub) AddRef(id, ref string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repo(id)
	r.refs[ref] = r.commit
}

// Gate makes repository id gated: the Hub answers only requests that carry
// "Authorization: Bearer token". It panics if AddRepo has not added id.
func (h *Hub) Gate(id, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repo(id).token = token
}

func (h *Hub) repo(id string) *repo {
	r := h.repos[id]
	if r == nil {
		panic("hubtest: no repository " + id + "; call AddRepo first")
	}
	return r
}

// PlanCDN makes the next CDN requests misbehave, one fault each, in order; once they
// are used up the CDN answers correctly again. It replaces any faults not yet used.
func (h *Hub) PlanCDN(faults ...CDNFault) {
	h.mu.Lock()
	h.plan = faults
	h.mu.Unlock()
}

// FailAPI makes the model API answer every request with status and the message
// "Internal Error" but no X-Error-Code, as the Hub does when it is down or
// rate-limiting; 0 makes it answer again.
func (h *Hub) FailAPI(status int) {
	h.mu.Lock()
	h.apiFail = status
	h.mu.Unlock()
}

// SetHeader sets header key to value on every resolve answer, over the Hub's own, to
// test how a client treats a hub that sends nonsense (or a weak ETag).
func (h *Hub) SetHeader(key, value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.headers == nil {
		h.headers = map[string]string{}
	}
	h.headers[key] = value
}

// HoldCDN makes each CDN request wait, from now until release is called or the test
// ends, so that a test can act while a download is in flight. Each held request first
// sends on arrived, or gives up sending once released.
func (h *Hub) HoldCDN() (arrived <-chan struct{}, release func()) {
	gate, arr := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	h.mu.Lock()
	h.gate, h.arrived, h.release = gate, arr, release
	h.mu.Unlock()
	return arr, release
}

// Requests returns the requests received so far, in order.
func (h *Hub) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// CDNBytes is how many body bytes the CDN has sent so far, so that a test can check
// that a resumed download fetched only what was missing.
func (h *Hub) CDNBytes() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cdnBytes
}

// SHA256 is the hex sha256 of b: the ETag the Hub gives an LFS file.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// gitBlobID is the id git gives b: the ETag the Hub gives a file that is not in LFS.
func gitBlobID(b []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(b))
	s.Write(b)
	return hex.EncodeToString(s.Sum(nil))
}

func isLFS(name string) bool { return strings.HasSuffix(strings.ToLower(name), ".gguf") }

func (h *Hub) record(server string, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, Request{Server: server, Method: r.Method, Path: r.URL.EscapedPath(),
		Range: r.Header.Get("Range"), Auth: r.Header.Get("Authorization")})
	h.mu.Unlock()
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// lookup finds repository id and its commit at rev, checking access as the Hub does,
// or answers the error and returns nil. h.mu is held.
func (h *Hub) lookup(w http.ResponseWriter, r *http.Request, id, rev string) (*repo, string) {
	rp := h.repos[id]
	auth := r.Header.Get("Authorization")
	if rp == nil {
		// Anonymous requests for a missing (or private) repository get 401, not 404,
		// so as not to reveal which private repositories exist.
		status := http.StatusNotFound
		if auth == "" {
			status = http.StatusUnauthorized
		}
		hubError(w, status, "RepoNotFound", "Repository not found")
		return nil, ""
	}
	if rp.token != "" && auth != "Bearer "+rp.token {
		status := http.StatusForbidden
		if auth == "" {
			status = http.StatusUnauthorized
		}
		hubError(w, status, "GatedRepo", "Access to model "+id+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		return nil, ""
	}
	commit, ok := rp.refs[rev]
	if !ok && rev != rp.commit {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, ""
	}
	if !ok {
		commit = rev
	}
	return rp, commit
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
		if h.apiFail != 0 {
			hubError(w, h.apiFail, "", "Internal Error")
			return
		}
		id := segs[2] + "/" + segs[3]
		rp, commit := h.lookup(w, r, id, segs[5])
		if rp == nil {
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
		json.NewEncoder(w).Encode(map[string]any{
			"_id": "6841e5f2c5ab1a9fa5e1f2a3", "id": id, "modelId": id, "author": segs[2],
			"sha": commit, "private": false, "gated": false, "disabled": false,
			"library_name": "gguf", "pipeline_tag": "feature-extraction", "tags": []string{"gguf", "feature-extraction"},
			"lastModified": "2025-06-05T10:00:00.000Z", "siblings": siblings,
		})
	case len(segs) >= 5 && segs[2] == "resolve" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		rp, commit := h.lookup(w, r, segs[0]+"/"+segs[1], segs[3])
		if rp == nil {
			return
		}
		name := strings.Join(segs[4:], "/")
		data, ok := rp.files[name]
		if !ok {
			hubError(w, http.StatusNotFound, "EntryNotFound", name+" does not exist on \""+segs[3]+"\"")
			return
		}
		hdr := w.Header()
		hdr.Set("X-Repo-Commit", commit)
		if isLFS(name) {
			sum := SHA256(data)
			// The redirect's own ETag describes the pointer file, not the blob: clients
			// must prefer X-Linked-Etag.
			hdr.Set("ETag", `W/"`+gitBlobID([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:"+sum))+`"`)
			hdr.Set("X-Linked-Etag", `"`+sum+`"`)
			hdr.Set("X-Linked-Size", strconv.Itoa(len(data)))
			hdr.Set("Location", h.cdn.URL+"/blobs/"+sum+"?X-Amz-Signature=fake&response-content-disposition=inline")
			h.setHeaders(hdr)
			w.WriteHeader(http.StatusFound)
			return
		}
		hdr.Set("ETag", `"`+gitBlobID(data)+`"`)
		hdr.Set("Content-Length", strconv.Itoa(len(data)))
		h.setHeaders(hdr)
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			w.Write(data)
		}
	default:
		hubError(w, http.StatusNotFound, "", "Sorry, we can't find the page you are looking for.")
	}
}

// setHeaders applies SetHeader's headers. h.mu is held.
func (h *Hub) setHeaders(hdr http.Header) {
	for k, v := range h.headers {
		hdr.Set(k, v)
	}
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.record("cdn", r)
	h.mu.Lock()
	gate, arrived := h.gate, h.arrived
	h.mu.Unlock()
	if gate != nil {
		select {
		case arrived <- struct{}{}:
		case <-gate:
		}
		<-gate
	}

	h.mu.Lock()
	var fault CDNFault
	if len(h.plan) > 0 {
		fault, h.plan = h.plan[0], h.plan[1:]
	}
	sum := strings.TrimPrefix(r.URL.Path, "/blobs/")
	data, ok := h.blobs[sum]
	h.mu.Unlock()
	if !ok {
		http.Error(w, "NoSuchKey", http.StatusNotFound)
		return
	}
	if fault.Status != 0 {
		http.Error(w, http.StatusText(fault.Status), fault.Status)
		return
	}
	if fault.Corrupt {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	// The CDN's own ETag is its storage's, not the sha256: clients must not use it.
	w.Header().Set("ETag", `"cdn-`+sum[:8]+`-3"`)
	w.Header().Set("Accept-Ranges", "bytes")
	start, status := 0, http.StatusOK
	if rng := r.Header.Get("Range"); rng != "" && !fault.IgnoreRange {
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
	body := data[start:]
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	cut := fault.Cut > 0 && fault.Cut < int64(len(body))
	if cut {
		body = body[:fault.Cut]
	}
	n, _ := w.Write(body)
	h.mu.Lock()
	h.cdnBytes += int64(n)
	h.mu.Unlock()
	if !cut {
		return
	}
	w.(http.Flusher).Flush()
	if fault.Stall {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	}
	panic(http.ErrAbortHandler) // drop the connection mid-body
}

package hub

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

// fakeHub behaves like the Hugging Face Hub as huggingface_hub sees it: the model API,
// resolve URLs that answer LFS files with a 302 to a CDN on another host (carrying
// X-Repo-Commit, X-Linked-Etag and X-Linked-Size), the X-Error-Code headers, 401 for
// unknown repositories asked anonymously, and gated repositories. The CDN supports
// Range and can be told, request by request, to drop the connection, stall, fail or
// ignore Range.
type fakeHub struct {
	t   *testing.T
	hub *httptest.Server
	cdn *httptest.Server

	mu       sync.Mutex // guards everything below
	repos    map[string]*fakeRepo
	reqs     []fakeRequest
	plan     []cdnStep // consumed one per CDN request
	corrupt  bool      // the CDN flips a byte: bytes no longer match the sha256
	weakETag bool      // X-Linked-Etag as W/"sha"
	apiFail  int       // answer API requests with this status
	headers  map[string]string
	// cdnGate, when set, blocks each CDN request until it is closed; cdnArrived is
	// signalled when a CDN request arrives.
	cdnGate    chan struct{}
	cdnArrived chan struct{}
	cdnServed  int64 // body bytes the CDN wrote
}

type fakeRepo struct {
	blobs  map[string][]byte // sha256 → LFS content, as the CDN stores it
	commit string
	refs   map[string]string // branch/tag → commit
	files  map[string][]byte
	token  string // gated: this bearer token is required
}

type fakeRequest struct {
	Server, Method, Path, Range, Auth string
}

type cdnStep struct {
	cut         int64 // send at most this many body bytes, then drop the connection (0: all)
	stall       bool  // after cut bytes, hang instead of dropping
	status      int   // answer with this status and no body
	ignoreRange bool  // answer 200 with the whole file whatever Range says
}

func newFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	f := &fakeHub{t: t, repos: map[string]*fakeRepo{}}
	f.hub = httptest.NewServer(http.HandlerFunc(f.serveHub))
	f.cdn = httptest.NewServer(http.HandlerFunc(f.serveCDN))
	t.Cleanup(func() {
		f.mu.Lock()
		if f.cdnGate != nil {
			select {
			case <-f.cdnGate:
			default:
				close(f.cdnGate)
			}
		}
		f.mu.Unlock()
		f.cdn.Close()
		f.hub.Close()
	})
	return f
}

// addRepo adds a repository whose commit is derived from its id.
func (f *fakeHub) addRepo(id string, files map[string][]byte) *fakeRepo {
	sum := sha1.Sum([]byte(id))
	r := &fakeRepo{commit: hex.EncodeToString(sum[:]), files: files, blobs: map[string][]byte{}}
	for name, d := range files {
		if isLFS(name) {
			r.blobs[sha256Hex(d)] = d
		}
	}
	r.refs = map[string]string{"main": r.commit}
	f.mu.Lock()
	f.repos[id] = r
	f.mu.Unlock()
	return r
}

func (f *fakeHub) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.reqs...)
}

func (f *fakeHub) resetRequests() {
	f.mu.Lock()
	f.reqs = nil
	f.cdnServed = 0
	f.mu.Unlock()
}

func (f *fakeHub) setPlan(steps ...cdnStep) {
	f.mu.Lock()
	f.plan = steps
	f.mu.Unlock()
}

func (f *fakeHub) record(server string, r *http.Request) {
	f.mu.Lock()
	f.reqs = append(f.reqs, fakeRequest{Server: server, Method: r.Method, Path: r.URL.EscapedPath(),
		Range: r.Header.Get("Range"), Auth: r.Header.Get("Authorization")})
	f.mu.Unlock()
}

func isLFS(name string) bool { return strings.HasSuffix(name, ".gguf") }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func gitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
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

func unescapeAll(segs []string) []string {
	out := make([]string, len(segs))
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			u = "\x00invalid"
		}
		out[i] = u
	}
	return out
}

// lookup finds the repository and checks access the way the Hub does.
func (f *fakeHub) lookup(w http.ResponseWriter, r *http.Request, id string) *fakeRepo {
	repo := f.repos[id]
	auth := r.Header.Get("Authorization")
	if repo == nil {
		// Anonymous requests for a missing (or private) repository get 401, not 404.
		status := http.StatusNotFound
		if auth == "" {
			status = http.StatusUnauthorized
		}
		hubError(w, status, "RepoNotFound", "Repository not found")
		return nil
	}
	if repo.token != "" && auth != "Bearer "+repo.token {
		status := http.StatusForbidden
		if auth == "" {
			status = http.StatusUnauthorized
		}
		hubError(w, status, "GatedRepo", "Access to model "+id+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		return nil
	}
	return repo
}

func (repo *fakeRepo) commitOf(rev string) (string, bool) {
	if c, ok := repo.refs[rev]; ok {
		return c, true
	}
	return rev, rev == repo.commit
}

func (f *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	f.record("hub", r)
	f.mu.Lock()
	defer f.mu.Unlock()
	segs := unescapeAll(strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/"))
	switch {
	case len(segs) == 6 && segs[0] == "api" && segs[1] == "models" && segs[4] == "revision" && r.Method == http.MethodGet:
		if f.apiFail != 0 {
			hubError(w, f.apiFail, "", "Internal Error")
			return
		}
		id := segs[2] + "/" + segs[3]
		repo := f.lookup(w, r, id)
		if repo == nil {
			return
		}
		commit, ok := repo.commitOf(segs[5])
		if !ok {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+segs[5])
			return
		}
		names := make([]string, 0, len(repo.files))
		for n := range repo.files {
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
		id := segs[0] + "/" + segs[1]
		repo := f.lookup(w, r, id)
		if repo == nil {
			return
		}
		commit, ok := repo.commitOf(segs[3])
		if !ok {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+segs[3])
			return
		}
		name := strings.Join(segs[4:], "/")
		data, ok := repo.files[name]
		if !ok {
			hubError(w, http.StatusNotFound, "EntryNotFound", name+" does not exist on \""+segs[3]+"\"")
			return
		}
		h := w.Header()
		h.Set("X-Repo-Commit", commit)
		if isLFS(name) {
			sum := sha256Hex(data) // a real hub stores it; hashing per request is fine here
			etag := `"` + sum + `"`
			if f.weakETag {
				etag = `W/` + etag
			}
			// The ETag of the redirect itself describes the pointer file, not the blob:
			// clients must prefer X-Linked-Etag.
			h.Set("ETag", `W/"`+gitBlobID([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:"+sum))+`"`)
			h.Set("X-Linked-Etag", etag)
			h.Set("X-Linked-Size", strconv.Itoa(len(data)))
			for k, v := range f.headers {
				h.Set(k, v)
			}
			h.Set("Location", f.cdn.URL+"/repos/ab/cd/"+sum+"?X-Amz-Signature=fake&response-content-disposition=inline")
			w.WriteHeader(http.StatusFound)
			return
		}
		h.Set("ETag", `"`+gitBlobID(data)+`"`)
		h.Set("Content-Length", strconv.Itoa(len(data)))
		for k, v := range f.headers {
			h.Set(k, v)
		}
		w.WriteHeader(http.StatusOK)
		w.Write(data)
	default:
		hubError(w, http.StatusNotFound, "", "Sorry, we can't find the page you are looking for.")
	}
}

func (f *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	f.record("cdn", r)
	f.mu.Lock()
	gate, arrived := f.cdnGate, f.cdnArrived
	f.mu.Unlock()
	if arrived != nil {
		arrived <- struct{}{}
	}
	if gate != nil {
		<-gate
	}

	f.mu.Lock()
	var step cdnStep
	if len(f.plan) > 0 {
		step, f.plan = f.plan[0], f.plan[1:]
	}
	sum := strings.TrimPrefix(r.URL.Path[strings.LastIndex(r.URL.Path, "/"):], "/")
	var data []byte
	for _, repo := range f.repos {
		if d, ok := repo.blobs[sum]; ok {
			data = d
		}
	}
	if f.corrupt && data != nil {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	f.mu.Unlock()

	if data == nil {
		http.Error(w, "NoSuchKey", http.StatusNotFound)
		return
	}
	if step.status != 0 {
		http.Error(w, http.StatusText(step.status), step.status)
		return
	}
	// The CDN's own ETag is its storage's, not the sha256: clients must not use it.
	w.Header().Set("ETag", `"cdn-`+sum[:8]+`-3"`)
	w.Header().Set("Accept-Ranges", "bytes")
	start := 0
	status := http.StatusOK
	if rng := r.Header.Get("Range"); rng != "" && !step.ignoreRange {
		from, ok := strings.CutPrefix(rng, "bytes=")
		n, err := strconv.Atoi(strings.TrimSuffix(from, "-"))
		if !ok || err != nil || !strings.HasSuffix(from, "-") {
			http.Error(w, "bad range", http.StatusBadRequest)
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
	if step.cut > 0 && step.cut < int64(len(body)) {
		body = body[:step.cut]
	} else {
		step.cut, step.stall = 0, false
	}
	n, _ := w.Write(body)
	f.mu.Lock()
	f.cdnServed += int64(n)
	f.mu.Unlock()
	if step.cut == 0 {
		return
	}
	w.(http.Flusher).Flush()
	if step.stall {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	}
	panic(http.ErrAbortHandler) // drop the connection mid-body
}

package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
)

// Engine turns token-id sequences into raw pooled vectors, one per sequence, in
// order, each of EngineInfo.NEmbd floats. The worker handler calls Embed from many
// requests at once; an implementation serialises internally if it must (the llama
// engine feeds a single goroutine that owns the native context).
//
// ctx is the HTTP request's context: it ends when the caller goes away, and it
// carries the caller's traceparent (see [TraceparentFromContext]).
//
// To refuse bad input, return an error for which errors.As finds a value with the
// method InputIndex() int, such as *[InputError]; the handler answers 400 naming that
// sequence. Any other error is answered 500.
type Engine interface {
	Embed(ctx context.Context, seqs [][]int32) ([][]float32, error)
}

// EngineInfo describes a loaded engine; GET /health reports it.
type EngineInfo struct {
	NEmbd          int        // vector length
	MaxTokens      int        // longest single sequence accepted (the context size)
	MaxBatchTokens int        // tokens decoded together; see Health.MaxBatchTokens
	Model          string     // model name, for logs and /health
	Device         *Device    // where it computes; nil if unknown
	ShortJobs      *ShortJobs // requests run ahead of a long input; nil if none
}

// deviceMemory is implemented by engines that can read their device's memory at
// any time (the llama engine); /health then reports it fresh instead of as it was
// at load.
type deviceMemory interface {
	DeviceMemory() (free, total int64)
}

// validate refuses an EngineInfo a client could not work with.
func (i EngineInfo) validate() error {
	switch {
	case i.NEmbd <= 0:
		return fmt.Errorf("engine reports n_embd %d; it must be positive", i.NEmbd)
	case i.MaxTokens <= 0:
		return fmt.Errorf("engine reports max_tokens %d; it must be positive", i.MaxTokens)
	case i.MaxBatchTokens <= 0:
		return fmt.Errorf("engine reports max_batch_tokens %d; it must be positive", i.MaxBatchTokens)
	}
	return nil
}

// MaxRequestBytes is the largest /embed request body a worker reads (about four
// million token ids); larger bodies are refused with 400. Callers split far below
// it, at Health.MaxBatchTokens.
const MaxRequestBytes = 32 << 20

// loadingRetryAfter is the Retry-After a loading worker suggests.
const loadingRetryAfter = "1"

// NewWorkerHandler returns the worker side of the protocol for an engine: GET
// /health and POST /embed. ready reports whether the engine may be used; while it
// returns false, /health answers 503 "loading", /embed answers 503 and e is never
// called (so e may be nil). A nil ready means always ready.
//
// The handler checks what it can without the engine (a non-empty list, no empty
// sequence, no sequence longer than info.MaxTokens, no negative id) so that every
// engine refuses those alike; the vocabulary range is the engine's to check.
//
// The returned handler is safe for concurrent use.
func NewWorkerHandler(e Engine, info EngineInfo, ready func() bool) http.Handler {
	if ready == nil {
		ready = func() bool { return true }
	}
	return &workerHandler{engine: e, info: info, ready: ready, pid: os.Getpid(), maxBody: MaxRequestBytes}
}

type workerHandler struct {
	engine  Engine
	info    EngineInfo
	ready   func() bool
	pid     int
	maxBody int64 // MaxRequestBytes; lowered by tests
}

func (h *workerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case pathHealth:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not allowed; use GET", r.Method, r.URL.Path), nil)
			return
		}
		h.health(w)
	case pathEmbed:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not allowed; use POST", r.Method, r.URL.Path), nil)
			return
		}
		h.traceEmbed(w, r)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s; the worker serves GET /health and POST /embed", r.URL.Path), nil)
	}
}

func (h *workerHandler) health(w http.ResponseWriter) {
	if !h.ready() {
		w.Header().Set("Retry-After", loadingRetryAfter)
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: StatusLoading, PID: h.pid})
		return
	}
	writeJSON(w, http.StatusOK, Health{
		Status:         StatusReady,
		NEmbd:          h.info.NEmbd,
		MaxTokens:      h.info.MaxTokens,
		MaxBatchTokens: h.info.MaxBatchTokens,
		Model:          h.info.Model,
		ShortJobs:      h.info.ShortJobs,
		Device:         h.device(),
		PID:            h.pid,
	})
}

// device is the engine's device with its memory as of now.
func (h *workerHandler) device() *Device {
	if h.info.Device == nil {
		return nil
	}
	d := *h.info.Device
	if m, ok := h.engine.(deviceMemory); ok {
		d.MemoryFree, d.MemoryTotal = m.DeviceMemory()
	}
	return &d
}

func (h *workerHandler) embed(w http.ResponseWriter, r *http.Request) {
	if !h.ready() {
		w.Header().Set("Retry-After", loadingRetryAfter)
		writeError(w, http.StatusServiceUnavailable, "the worker is still loading its model", nil)
		return
	}
	seqs, err := decodeEmbedRequest(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), nil)
		return
	}
	if idx, msg := h.check(seqs); msg != "" {
		writeError(w, http.StatusBadRequest, msg, idx)
		return
	}
	annotateEmbed(r.Context(), seqs)

	ctx := r.Context()
	if tp := r.Header.Get("traceparent"); tp != "" && validTraceparent(tp) {
		ctx = ContextWithTraceparent(ctx, tp)
	}
	vecs, err := h.engine.Embed(ctx, seqs)
	if err != nil {
		if i, reason, ok := asInputError(err); ok {
			writeError(w, http.StatusBadRequest, reason, &i)
			return
		}
		// Also when ctx ended: the caller has gone and reads nothing, but the
		// status must not claim success.
		writeError(w, http.StatusInternalServerError, "engine: "+err.Error(), nil)
		return
	}
	if err := checkVectors(vecs, len(seqs), h.info.NEmbd); err != nil {
		writeError(w, http.StatusInternalServerError, "engine: "+err.Error(), nil)
		return
	}
	// Encode before writing the status, so that a failure is a 500 rather than a
	// truncated 200.
	body, err := json.Marshal(embedResponse{Embeddings: vecs})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding the embeddings: "+err.Error(), nil)
		return
	}
	writeBody(w, http.StatusOK, body)
}

// decodeEmbedRequest reads exactly one JSON object holding "tokens".
func decodeEmbedRequest(body io.Reader) ([][]int32, error) {
	dec := json.NewDecoder(body)
	var req embedRequest
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("the request body exceeds %d bytes; send fewer tokens per request", tooBig.Limit)
		}
		return nil, fmt.Errorf(`the body is not a JSON object {"tokens":[[id,...],...]}: %w`, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the body holds data after the JSON object")
	}
	if req.Tokens == nil {
		return nil, errors.New(`"tokens" is missing; send {"tokens":[[id,...],...]}`)
	}
	return req.Tokens, nil
}

// check applies the engine-independent limits. It returns the offending index (nil
// for the request as a whole) and a message, or "" when the request is acceptable.
func (h *workerHandler) check(seqs [][]int32) (*int, string) {
	if len(seqs) == 0 {
		return nil, `"tokens" is empty; send at least one sequence`
	}
	for i, s := range seqs {
		switch {
		case len(s) == 0:
			return &i, "the sequence is empty"
		case h.info.MaxTokens > 0 && len(s) > h.info.MaxTokens:
			return &i, fmt.Sprintf("the sequence has %d tokens; this worker accepts at most %d (max_tokens)", len(s), h.info.MaxTokens)
		}
		for j, t := range s {
			if t < 0 {
				return &i, fmt.Sprintf("token %d is id %d; ids are not negative", j, t)
			}
		}
	}
	return nil, ""
}

// checkVectors guards the protocol against an engine bug: callers index the answer
// by position and assume every vector has n_embd floats.
func checkVectors(vecs [][]float32, want, nEmbd int) error {
	if len(vecs) != want {
		return fmt.Errorf("returned %d vectors for %d sequences", len(vecs), want)
	}
	for i, v := range vecs {
		if len(v) != nEmbd {
			return fmt.Errorf("vector %d has %d floats; n_embd is %d", i, len(v), nEmbd)
		}
		for j, f := range v {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return fmt.Errorf("vector %d holds %v at %d", i, f, j)
			}
		}
	}
	return nil
}

func writeError(w http.ResponseWriter, status int, msg string, index *int) {
	writeJSON(w, status, errorResponse{Error: msg, Index: index})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only the fixed protocol shapes come here; they always encode.
		panic(fmt.Sprintf("backends: encoding %T: %v", v, err))
	}
	writeBody(w, status, body)
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a write error means the caller has gone
}

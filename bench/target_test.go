package bench

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer answers POST /v1/embeddings with vec(text) for each input, in the
// encoding asked for, listing the data in reverse order (indexes say which is which).
type fakeServer struct {
	vec    func(text string) []float32
	status int // when not 0 and not 200, every request gets it with an error body
	limit  int // when not 0, a request with a longer text gets 400
	tokens func(texts []string) int
	// delay, when set, is how long a request takes; a client that goes away ends it.
	delay func(texts []string) time.Duration
	// cached, when set, is the request's usage.prompt_tokens_details.cached_tokens.
	cached func(texts []string) int

	mu    sync.Mutex // guards calls and last
	calls int
	last  embeddingsRequest
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/embeddings" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var req embeddingsRequest
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.calls++
	f.last = req
	f.mu.Unlock()
	if f.delay != nil {
		select {
		case <-time.After(f.delay(req.Input)):
		case <-r.Context().Done():
			return
		}
	}
	status := f.status
	for _, in := range req.Input {
		if f.limit > 0 && len(in) > f.limit {
			status = http.StatusBadRequest
		}
	}
	if status != 0 && status != http.StatusOK {
		w.WriteHeader(status)
		io.WriteString(w, `{"error":{"message":"too long","type":"invalid_request_error"}}`)
		return
	}
	type datum struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	var data []datum
	for i := len(req.Input) - 1; i >= 0; i-- {
		v := f.vec(req.Input[i])
		var emb any = v
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for k, x := range v {
				binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		data = append(data, datum{"embedding", i, emb})
	}
	tokens := 0
	if f.tokens != nil {
		tokens = f.tokens(req.Input)
	}
	usage := map[string]any{"prompt_tokens": tokens, "total_tokens": tokens}
	if f.cached != nil {
		usage["prompt_tokens_details"] = map[string]int{"cached_tokens": f.cached(req.Input)}
	}
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model, "usage": usage})
}

// textVec is a deterministic vector of a text: its length and first byte.
func textVec(s string) []float32 {
	first := float32(0)
	if s != "" {
		first = float32(s[0])
	}
	return []float32{float32(len(s)), first, 1}
}

func TestServerEmbed(t *testing.T) {
	inputs := []Input{{Text: "alpha", Tokens: []int32{1, 2}}, {Text: "be", Tokens: []int32{3}}}
	tests := []struct {
		name       string
		encoding   string
		status     int
		wantStatus int
		wantErr    string
	}{
		{"base64 by default", "", 200, 200, ""},
		{"float", "float", 200, 200, ""},
		{"error status", "", 400, 400, "HTTP 400: {\"error\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &fakeServer{vec: textVec, status: tt.status, tokens: func(in []string) int { return 3 * len(in) }}
			srv := httptest.NewServer(fs)
			defer srv.Close()
			s := &Server{BaseURL: srv.URL + "/v1/", Model: "m", Encoding: tt.encoding, Client: NewClient()}
			o := s.Embed(context.Background(), inputs, true)
			if o.Status != tt.wantStatus {
				t.Fatalf("status %d, want %d (err %v)", o.Status, tt.wantStatus, o.Err)
			}
			wantEnc := tt.encoding
			if wantEnc == "" {
				wantEnc = "base64"
			}
			if fs.last.EncodingFormat != wantEnc || fs.last.Model != "m" || !slices.Equal(fs.last.Input, []string{"alpha", "be"}) {
				t.Errorf("server saw %+v", fs.last)
			}
			if tt.wantErr != "" {
				if o.Err == nil || !strings.HasPrefix(o.Err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want prefix %q", o.Err, tt.wantErr)
				}
				return
			}
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			if o.Tokens != 6 {
				t.Errorf("tokens %d, want 6", o.Tokens)
			}
			for i, in := range inputs {
				if !slices.Equal(o.Vectors[i], textVec(in.Text)) {
					t.Errorf("vector %d = %v, want %v (data came in reverse order)", i, o.Vectors[i], textVec(in.Text))
				}
			}
			if o2 := s.Embed(context.Background(), inputs, false); o2.Err != nil || o2.Vectors != nil || o2.Tokens != 6 {
				t.Errorf("without vectors: err %v, vectors %v, tokens %d", o2.Err, o2.Vectors, o2.Tokens)
			}
		})
	}
}

func TestServerEmbedMalformed(t *testing.T) {
	tests := []struct {
		name, body, wantErr string
	}{
		{"count", `{"data":[{"index":0,"embedding":[1]}]}`, "1 embeddings for 2 inputs"},
		{"repeated index", `{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}`, "out of range or repeated"},
		{"bad base64 length", `{"data":[{"index":0,"embedding":"AAA="},{"index":1,"embedding":[1]}]}`, "not a whole number of float32s"},
		{"not JSON", `<html>`, "decode response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, tt.body) }))
			defer srv.Close()
			s := &Server{BaseURL: srv.URL + "/v1"}
			o := s.Embed(context.Background(), []Input{{Text: "a"}, {Text: "b"}}, true)
			if o.Err == nil || !strings.Contains(o.Err.Error(), tt.wantErr) {
				t.Errorf("err %v, want %q", o.Err, tt.wantErr)
			}
		})
	}
}

// fakeEngine is a floor engine: a vector per token sequence, its calls recorded.
type fakeEngine struct {
	mu    sync.Mutex // guards batches
	batch []int      // the number of sequences of each call
}

// seqVec is a deterministic pseudo-random vector of a token sequence: different
// sequences give nearly unrelated vectors, as a real model's do.
func seqVec(seq []int32) []float32 {
	h := fnv.New64a()
	binary.Write(h, binary.LittleEndian, seq)
	r := rand.New(rand.NewPCG(h.Sum64(), 1))
	v := make([]float32, 16)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func (e *fakeEngine) Embed(_ context.Context, seqs [][]int32) ([][]float32, error) {
	e.mu.Lock()
	e.batch = append(e.batch, len(seqs))
	e.mu.Unlock()
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = seqVec(s)
	}
	return out, nil
}

func TestFloorEmbed(t *testing.T) {
	f := &Floor{Engine: &fakeEngine{}}
	o := f.Embed(context.Background(), []Input{{Tokens: []int32{5, 6, 7}}, {Tokens: []int32{9}}}, true)
	if o.Err != nil || o.Status != 200 || o.Tokens != 4 {
		t.Fatalf("status %d, tokens %d, err %v; want 200, 4, nil", o.Status, o.Tokens, o.Err)
	}
	if !slices.Equal(o.Vectors[0], seqVec([]int32{5, 6, 7})) || !slices.Equal(o.Vectors[1], seqVec([]int32{9})) {
		t.Errorf("vectors %v", o.Vectors)
	}
}

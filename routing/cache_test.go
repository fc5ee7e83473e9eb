package routing

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unique"
)

// stampBackend returns, for each sequence, a vector that holds its tokens' sum
// and a stamp unique to each computation: a vector the cache returns for a
// sequence can be told apart from a recompute, and from another sequence's.
type stampBackend struct {
	dim      int
	computed atomic.Int64 // sequences computed
	block    chan struct{}
}

func (b *stampBackend) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	if b.block != nil {
		select {
		case <-b.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		v := make([]float32, b.dim)
		for _, id := range s {
			v[0] += float32(id)
		}
		v[1] = float32(b.computed.Add(1))
		for j := 2; j < b.dim; j++ {
			v[j] = float32(len(s)+j) * 0.25
		}
		out[i] = v
	}
	return out, nil
}

func cachedRouter(cache *Cache, identity string, b *stampBackend) *Router {
	return &Router{Config: Config{Dim: b.dim}, Tokenizer: byteTokenizer{}, Warm: b, Cache: cache,
		Identity: func() string { return identity }}
}

// A repeated input is answered from the cache: the same bits as its first answer,
// no worker call, its tokens reported as cached; dimensions and normalisation are
// applied to the cached raw vector as to a computed one.
func TestCacheHitIsTheSameVector(t *testing.T) {
	b := &stampBackend{dim: 64}
	r := cachedRouter(&Cache{MaxBytes: 1 << 20}, "sha-a", b)
	ctx := context.Background()
	first, err := r.Embed(ctx, &Request{Texts: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	if !first.Cached || first.CachedTokens != 0 || b.computed.Load() != 2 {
		t.Fatalf("first request: cached %v %d tokens, computed %d; want a miss of both", first.Cached, first.CachedTokens, b.computed.Load())
	}
	again, err := r.Embed(ctx, &Request{Texts: []string{"beta", "gamma", "alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.computed.Load() != 3 {
		t.Fatalf("computed %d sequences; want only gamma computed again", b.computed.Load())
	}
	if !slices.Equal(again.Vectors[0], first.Vectors[1]) || !slices.Equal(again.Vectors[2], first.Vectors[0]) {
		t.Fatal("a cached vector differs from its first answer")
	}
	if want := len("beta") + 1 + len("alpha") + 1; again.CachedTokens != want || again.Tokens != want+len("gamma")+1 {
		t.Fatalf("tokens %d cached %d; want %d cached of %d", again.Tokens, again.CachedTokens, want, want+len("gamma")+1)
	}
	// The raw vector is kept: a cut, a raw answer and the full one all derive from
	// it as from a computed vector.
	noCache := &Router{Config: Config{Dim: 64}, Tokenizer: byteTokenizer{}, Warm: &fixedBackend{v: mustRaw(t, r, "alpha")}}
	for _, req := range []Request{{Dimensions: 32}, {Raw: true}, {Raw: true, Dimensions: 40}} {
		req.Texts = []string{"alpha"}
		got, err := r.Embed(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := noCache.Embed(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Vectors[0], want.Vectors[0]) {
			t.Fatalf("%+v from the cache differs from the same raw vector computed", req)
		}
	}
	if b.computed.Load() != 3 {
		t.Fatalf("computed %d; the derived answers must all be hits", b.computed.Load())
	}
}

// fixedBackend returns one vector for every sequence.
type fixedBackend struct{ v []float32 }

func (f *fixedBackend) Embed(_ context.Context, seqs [][]int32) ([][]float32, error) {
	out := make([][]float32, len(seqs))
	for i := range out {
		out[i] = slices.Clone(f.v)
	}
	return out, nil
}

// mustRaw is the raw vector r's cache holds for text.
func mustRaw(t *testing.T, r *Router, text string) []float32 {
	t.Helper()
	res, err := r.Embed(context.Background(), &Request{Texts: []string{text}, Raw: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.Vectors[0]
}

// The cache never answers with another model's vector: another file identity,
// the same file as a reranker, or an identity not known yet all miss.
func TestCacheKeepsModelsApart(t *testing.T) {
	cache := &Cache{MaxBytes: 1 << 20}
	ctx := context.Background()
	a, b := &stampBackend{dim: 64}, &stampBackend{dim: 64}
	b.computed.Store(1000) // b's stamps differ from a's
	ra, rb := cachedRouter(cache, "sha-a", a), cachedRouter(cache, "sha-b", b)
	va, _ := ra.Embed(ctx, &Request{Texts: []string{"same text"}})
	vb, _ := rb.Embed(ctx, &Request{Texts: []string{"same text"}})
	if a.computed.Load() != 1 || b.computed.Load() != 1001 || slices.Equal(va.Vectors[0], vb.Vectors[0]) {
		t.Fatalf("model b got model a's vector (computed %d, %d)", a.computed.Load(), b.computed.Load())
	}
	if k1, k2 := ra.cacheModel(), (&Router{Config: Config{Rerank: true}, Cache: cache, Identity: ra.Identity}).cacheModel(); k1 == k2 {
		t.Fatalf("the same file as embedder and reranker share the identity %q", k1)
	}
	// The same file served with another pooling (--pooling b=mean) gives other
	// vectors for the same tokens.
	mean := &stampBackend{dim: 64}
	mean.computed.Store(2000)
	rm := cachedRouter(cache, "sha-a", mean)
	rm.Config.Pooling = "mean"
	vm, _ := rm.Embed(ctx, &Request{Texts: []string{"same text"}})
	if mean.computed.Load() != 2001 || vm.CachedTokens != 0 || slices.Equal(vm.Vectors[0], va.Vectors[0]) {
		t.Fatalf("the same file with mean pooling got the last-token model's cached vector (computed %d, %d tokens cached)", mean.computed.Load(), vm.CachedTokens)
	}
	unknown := cachedRouter(cache, "", a)
	res, _ := unknown.Embed(ctx, &Request{Texts: []string{"same text"}})
	if res.Cached || a.computed.Load() != 2 {
		t.Fatal("a router whose identity is not known yet used the cache")
	}
	// A hash that matched with other ids (a collision) is a miss.
	cache.mu.Lock()
	k := cacheKey("m", []int32{1, 2})
	cache.entries[k] = cache.lru.PushFront(&cacheEntry{key: k, model: unique.Make("m"), ids: []int32{3, 4}, vector: []float32{1}})
	cache.mu.Unlock()
	if _, ok := cache.get("m", []int32{1, 2}); ok {
		t.Fatal("a hash collision returned another sequence's vector")
	}
}

// The cache stays within MaxBytes, dropping the least recently used entries.
func TestCacheBoundedLRU(t *testing.T) {
	const dim = 16
	perEntry := int64(4*dim+4*2) + entryOverhead // a one-byte text and EOS
	cache := &Cache{MaxBytes: 3 * perEntry}
	b := &stampBackend{dim: dim}
	r := cachedRouter(cache, "sha", b)
	ctx := context.Background()
	embed := func(s string) {
		if _, err := r.Embed(ctx, &Request{Texts: []string{s}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"a", "b", "c"} {
		embed(s)
	}
	embed("a") // a is now the most recent: b goes first
	embed("d")
	if n, bytes := cache.Stats(); n != 3 || bytes != 3*perEntry {
		t.Fatalf("%d entries, %d bytes; want 3 entries, %d bytes", n, bytes, 3*perEntry)
	}
	before := b.computed.Load()
	for _, s := range []string{"a", "c", "d"} {
		embed(s)
	}
	if b.computed.Load() != before {
		t.Fatal("a, c or d was evicted instead of b, the least recently used")
	}
	embed("b")
	if b.computed.Load() != before+1 {
		t.Fatal("b was still cached")
	}
	for i := range 1000 {
		embed(string(rune('A' + i%50)))
		if _, bytes := cache.Stats(); bytes > cache.MaxBytes {
			t.Fatalf("%d bytes, over MaxBytes %d", bytes, cache.MaxBytes)
		}
	}
	// An entry larger than the whole cache is not stored.
	small := &Cache{MaxBytes: 10}
	if small.put("m", []int32{1}, make([]float32, 64)) != 0 || len(small.entries) != 0 {
		t.Fatal("an entry over MaxBytes was stored")
	}
}

// The cache's lock is not held while workers compute: a request answered from
// the cache completes while another request's compute is blocked.
func TestCacheNoLockAcrossCompute(t *testing.T) {
	b := &stampBackend{dim: 8}
	r := cachedRouter(&Cache{MaxBytes: 1 << 20}, "sha", b)
	ctx := context.Background()
	if _, err := r.Embed(ctx, &Request{Texts: []string{"cached"}}); err != nil {
		t.Fatal(err)
	}
	b.block = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = r.Embed(ctx, &Request{Texts: []string{"blocked in the worker"}})
	}()
	done := make(chan error, 1)
	go func() {
		_, err := r.Embed(ctx, &Request{Texts: []string{"cached"}})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cache hit waited for another request's compute")
	}
	close(b.block)
	wg.Wait()
}

// Concurrent requests over overlapping texts (run with -race): every answer is
// the one the first computation of its text gave.
func TestCacheConcurrent(t *testing.T) {
	b := &stampBackend{dim: 8}
	r := cachedRouter(&Cache{MaxBytes: 1 << 20}, "sha", b)
	texts := []string{"a", "bb", "ccc", "dddd", "eeeee"}
	var wg sync.WaitGroup
	results := make([][][]float32, 16)
	for g := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				res, err := r.Embed(context.Background(), &Request{Texts: texts})
				if err != nil {
					t.Error(err)
					return
				}
				results[g] = res.Vectors
			}
		}()
	}
	wg.Wait()
	for g := range results {
		for i := range texts {
			if !slices.Equal(results[g][i], results[0][i]) {
				t.Fatalf("goroutine %d, text %d: another vector than goroutine 0's", g, i)
			}
		}
	}
}

// An entry counts what it holds: over thousands of entries, the live heap they
// take (runtime.MemStats after collections) per entry is at most what the cache
// counts (1% allowed for the measurement), and at least 1/1.12 of it: the map's share, counted at its largest
// (109 bytes), falls to 55 as its tables fill before they split, which is 12% of
// an entry of 64 floats and 3% of one of 384. The vectors are
// decoded from JSON as the worker client decodes them, so a vector that arrives
// in an oversized block (384 floats in a block of 512) is counted as the cache
// keeps it. Before the cache copied its vectors and counted size classes, it
// counted 468 bytes an entry of 64 floats where 500 to 510 were held, 1748 where
// 2273 were for 384 floats, and 4308 where 5388 were for 1024.
func TestCacheEntrySize(t *testing.T) {
	const model = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef|pooling=last|task=embed"
	for _, tc := range []struct{ dim, entries int }{
		{64, 2000}, {64, 7000}, {64, 20000}, // the tiny model's vectors; the map at several sizes
		{384, 5000},  // all-MiniLM-L6-v2
		{1024, 3000}, // Qwen3-Embedding-0.6B
	} {
		// One worker answer of 50 vectors, decoded again for each 50 entries.
		const perAnswer = 50
		vec := "[" + strings.TrimSuffix(strings.Repeat("0.25,", tc.dim), ",") + "]"
		answer := []byte(`{"embeddings":[` + strings.TrimSuffix(strings.Repeat(vec+",", perAnswer), ",") + "]}")
		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := &Cache{MaxBytes: 1 << 40}
		for i := 0; i < tc.entries; i += perAnswer {
			var out struct{ Embeddings [][]float32 }
			if err := json.Unmarshal(answer, &out); err != nil {
				t.Fatal(err)
			}
			for j, v := range out.Embeddings {
				n := i + j
				c.put(model, []int32{int32(n), int32(n >> 7), 151643}, v)
			}
		}
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		n, counted := c.Stats()
		if n != tc.entries {
			t.Fatalf("%d entries, want %d", n, tc.entries)
		}
		held := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		perHeld, perCounted := held/float64(n), float64(counted)/float64(n)
		t.Logf("%d floats, %d entries: %.1f bytes an entry held, %d counted", tc.dim, n, perHeld, counted/int64(n))
		if perCounted < perHeld*0.99 || perCounted > perHeld*1.12 {
			t.Errorf("%d floats, %d entries: the cache counts %.1f bytes an entry, the heap holds %.1f; want the count at least what is held and within 12%% of it",
				tc.dim, n, perCounted, perHeld)
		}
		runtime.KeepAlive(c)
	}
}

package routing

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
	"unique"
	"unsafe"

	"go.opentelemetry.io/otel/metric"
)

// Cache is an exact embedding cache: it keeps the raw pooled vector a worker
// returned for a token sequence, keyed on the model file's identity and the exact
// token ids the model saw (wrapping, truncation and <|endoftext|> applied), and
// gives it back for the same sequence instead of computing it again.
//
// It is exact because the engine's vectors do not depend on what a sequence is
// batched with or which worker embeds it (docs/routing.md, "The engine: precision
// and memory"): a hit is the vector a recompute would return, bit for bit. It
// holds raw vectors, before Matryoshka truncation and normalisation, so one entry
// serves every `dimensions`, `normalize` and output encoding; what the model
// computes (its file, pooling and task) is in the key.
//
// A hit is decided by comparing the model identity and every token id, never by
// the hash alone, so no sequence can get another's vector. Memory is bounded by
// MaxBytes, least recently used entries going first; an entry counts what it
// holds on the heap (entrySize): its own copies of the ids and the vector, its
// struct, its list element and its share of the map. Its lock is never held
// across a compute: Router.run looks up, releases, computes the misses, and
// stores them. Two requests that miss the same sequence at once both compute
// it; the second store is a no-op.
//
// One Cache may be shared by several routers (models): the identity keeps their
// vectors apart. Safe for concurrent use.
type Cache struct {
	// MaxBytes bounds the memory of the entries; it must be positive.
	MaxBytes int64

	mu      sync.Mutex // guards the fields below
	entries map[[32]byte]*list.Element
	lru     list.List // of *cacheEntry, most recently used first
	bytes   int64
}

// cacheEntry is one sequence's vector. vector is never written after it is
// stored: callers get it as it is (finish copies before it changes anything).
// model is a unique handle, so that entries share one copy of the identity
// string: Router.cacheModel builds a new string for every request, and an entry
// holding it would keep about 100 bytes more than it counts.
type cacheEntry struct {
	key    [32]byte
	model  unique.Handle[string]
	ids    []int32
	vector []float32
	size   int64
}

// allocSize is the heap memory an allocation of n bytes takes: n rounded up to
// the allocator's size class (or to whole pages for a large one). slices.Grow of
// an empty slice allocates exactly one such block and reports it as the capacity.
func allocSize(n uintptr) int64 { return int64(cap(slices.Grow([]byte(nil), int(n)))) }

// mapEntryBytes is an entry's share of the map's memory, counted at its largest.
// A swiss-table map (Go 1.24 on) keeps slots in groups of 8 behind 8 control
// bytes, so a slot of a [32]byte key and a pointer takes 41 bytes; a table holds
// at most 1024 slots, whose 41 KiB of groups the allocator rounds up to 48 KiB
// (whole 8 KiB pages): 48 bytes a slot. A table is split when 7/8 of its slots
// are full, leaving two tables 7/16 full, so an entry holds at most 16/7 slots:
// 109 bytes. Between splits the share falls to 55 bytes; over 2,000 to 20,000
// entries TestCacheEntrySize measured 61 to 92.
const mapEntryBytes = 48 * 16 / 7

// entryOverhead is what an entry holds besides the arrays of its ids and vector:
// its struct, its list element and its share of the map.
var entryOverhead = allocSize(unsafe.Sizeof(cacheEntry{})) + allocSize(unsafe.Sizeof(list.Element{})) + mapEntryBytes

// entrySize is the memory an entry of these ids and vector holds, both being
// the entry's own copies (slices.Clone: their capacity is their whole block).
func entrySize(ids []int32, vector []float32) int64 {
	return 4*int64(cap(ids)) + 4*int64(cap(vector)) + entryOverhead
}

// cacheKey hashes the model identity and the ids: the map's key. A hit still
// compares both in full.
func cacheKey(model string, ids []int32) [32]byte {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(model)))
	h.Write(n[:])
	h.Write([]byte(model))
	buf := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(id))
	}
	h.Write(buf)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// get returns the vector stored for ids under model, marking it recently used.
func (c *Cache) get(model string, ids []int32) ([]float32, bool) {
	k := cacheKey(model, ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[k]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if e.model.Value() != model || !slices.Equal(e.ids, ids) {
		return nil, false // a hash collision: never another sequence's vector
	}
	c.lru.MoveToFront(el)
	return e.vector, true
}

// put stores a copy of v for ids under model and evicts the least recently used
// entries beyond MaxBytes; it returns how many it evicted. An entry larger than
// MaxBytes on its own is not stored.
//
// v is copied because a worker's vector comes out of encoding/json, which grows
// a slice by appending: a 1024-float vector arrives in a block of 1344 floats
// (5376 bytes, not 4096), a 384-float one in 512. Kept as it is, it would hold a
// third more than its length says.
func (c *Cache) put(model string, ids []int32, v []float32) (evicted int) {
	if int64(4*len(ids)+4*len(v))+entryOverhead > c.MaxBytes {
		return 0 // too large even before rounding: spare the copies
	}
	e := &cacheEntry{key: cacheKey(model, ids), ids: slices.Clone(ids), vector: slices.Clone(v)}
	e.size = entrySize(e.ids, e.vector)
	if e.size > c.MaxBytes {
		return 0
	}
	e.model = unique.Make(model)
	k := e.key
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[32]byte]*list.Element{}
	}
	if el, ok := c.entries[k]; ok {
		c.lru.MoveToFront(el) // computed twice at once: keep the first
		return 0
	}
	c.entries[k] = c.lru.PushFront(e)
	c.bytes += e.size
	cacheBytes.Add(context.Background(), e.size)
	cacheEntries.Add(context.Background(), 1)
	for c.bytes > c.MaxBytes {
		old := c.lru.Back().Value.(*cacheEntry)
		c.lru.Remove(c.lru.Back())
		delete(c.entries, old.key)
		c.bytes -= old.size
		cacheBytes.Add(context.Background(), -old.size)
		cacheEntries.Add(context.Background(), -1)
		evicted++
	}
	return evicted
}

// Stats reports the entries and the bytes they take.
func (c *Cache) Stats() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.bytes
}

var (
	cacheHits, _ = meter.Int64Counter("embed_stack.cache.hits",
		metric.WithDescription("Sequences whose vector the embedding cache held (--cache-size), by model."))
	cacheMisses, _ = meter.Int64Counter("embed_stack.cache.misses",
		metric.WithDescription("Sequences the embedding cache did not hold, computed by a worker, by model."))
	cacheEvictions, _ = meter.Int64Counter("embed_stack.cache.evictions",
		metric.WithDescription("Entries the embedding cache dropped, least recently used first, to stay within --cache-size, by model."))
	cacheBytes, _ = meter.Int64UpDownCounter("embed_stack.cache.bytes",
		metric.WithDescription("Memory the embedding cache's entries take (vectors, token ids and overhead)."), metric.WithUnit("By"))
	cacheEntries, _ = meter.Int64UpDownCounter("embed_stack.cache.entries",
		metric.WithDescription("Entries in the embedding cache."))
)

// cacheModel is the identity under which this router's vectors are cached: the
// model file's identity, with the pooling and the task (the same GGUF served as a
// reranker returns other vectors), or "" when the router has no cache or the
// identity is not known yet (the file is still being hashed): the cache is then
// skipped.
func (r *Router) cacheModel() string {
	if r.Cache == nil || r.Identity == nil {
		return ""
	}
	id := r.Identity()
	if id == "" {
		return ""
	}
	task := "embed"
	if r.Config.Rerank {
		task = "rerank"
	}
	return id + "|pooling=" + r.Config.Pooling + "|task=" + task
}

// run sends seqs to the workers, except those the cache holds, and stores what
// the workers return. It returns each sequence's raw output in order, the routing
// decision (with the tokens the cache answered) and the tokens of all sequences.
func (r *Router) run(ctx context.Context, seqs [][]int32) ([][]float32, routeCounts, int, error) {
	model := r.cacheModel()
	if model == "" {
		return r.compute(ctx, seqs)
	}
	raw := make([][]float32, len(seqs))
	var miss []int
	var cachedInputs, cachedTokens, tokens int
	for i, s := range seqs {
		tokens += len(s)
		if v, ok := r.Cache.get(model, s); ok {
			raw[i] = v
			cachedInputs++
			cachedTokens += len(s)
			continue
		}
		miss = append(miss, i)
	}
	if cachedInputs > 0 {
		cacheHits.Add(ctx, int64(cachedInputs), r.metrics.modelAdd...)
	}
	var counts routeCounts
	if len(miss) > 0 {
		cacheMisses.Add(ctx, int64(len(miss)), r.metrics.modelAdd...)
		sub := make([][]int32, len(miss))
		for j, i := range miss {
			sub[j] = seqs[i]
		}
		vecs, c, _, err := r.compute(ctx, sub)
		if err != nil {
			return nil, c, tokens, err
		}
		counts = c
		evicted := 0
		for j, i := range miss {
			raw[i] = vecs[j]
			evicted += r.Cache.put(model, seqs[i], vecs[j])
		}
		if evicted > 0 {
			cacheEvictions.Add(ctx, int64(evicted), r.metrics.modelAdd...)
		}
	}
	counts.cached = true
	counts.cachedInputs, counts.cachedTokens = cachedInputs, cachedTokens
	return raw, counts, tokens, nil
}

package tokenizer

import (
	"hash/maphash"
	"sync"
)

// mergeRule is what one entry of the merge list says about an adjacent pair of ids:
// its rank (position in the list; lower merges first) and the id of the merged token.
type mergeRule struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe applies the merge list to one pre-token. It is immutable after New and safe for
// concurrent use.
type bpe struct {
	merges  mergeTable
	byteIDs [256]int32 // id of each single-byte token
	scratch sync.Pool  // *bpeScratch
}

// symbol is one current part of a word being merged, in a doubly linked list over the
// word's bytes. A symbol absorbed into its left neighbour has id -1.
type symbol struct {
	id         int32
	prev, next int32 // indices into the symbol slice; -1 at either end
}

// candidate is a possible merge of the symbol at pos with its right neighbour.
type candidate struct {
	rank, pos, id int32
}

type bpeScratch struct {
	syms []symbol
	heap []candidate
}

// appendWord appends the ids of word (raw bytes of one pre-token) to dst: its bytes'
// tokens merged by mergeAll.
func (b *bpe) appendWord(dst []int32, word string) []int32 {
	n := len(word)
	if n == 1 {
		return append(dst, b.byteIDs[word[0]])
	}
	sc, _ := b.scratch.Get().(*bpeScratch)
	if sc == nil {
		sc = &bpeScratch{}
	}
	syms := sc.syms[:0]
	for i := 0; i < n; i++ {
		syms = append(syms, symbol{id: b.byteIDs[word[i]], prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[n-1].next = -1

	h := mergeAll(syms, &b.merges, candidateHeap(sc.heap[:0]))
	for i := int32(0); i >= 0; i = syms[i].next { // symbol 0 is never absorbed
		dst = append(dst, syms[i].id)
	}

	sc.syms, sc.heap = syms, h
	if cap(sc.syms) <= 4096 { // do not pin the buffers of a pathological word
		b.scratch.Put(sc)
	}
	return dst
}

// mergeAll merges the symbols of one word, a list linked from syms[0], in place:
// Hugging Face's Word::merge_all without dropout, a priority queue of candidate merges
// ordered by (rank, position), popped one at a time. A popped candidate is stale when
// its symbol has been absorbed or its right neighbour has changed, which shows as the
// pair now merging to a different id (the left symbol of a pair only ever grows by
// absorbing that very neighbour, so an unchanged merged id means an unchanged pair).
// Merging one pair at a time by (rank, position) is what makes overlapping equal pairs
// ("aaa" with merge "a a") come out as HF has them. It returns h emptied, for reuse.
func mergeAll(syms []symbol, merges *mergeTable, h candidateHeap) candidateHeap {
	for i := int32(0); i >= 0 && syms[i].next >= 0; i = syms[i].next {
		if m, ok := merges.get(syms[i].id, syms[syms[i].next].id); ok {
			h.push(candidate{rank: m.rank, pos: i, id: m.id})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		s := &syms[top.pos]
		if s.id < 0 || s.next < 0 {
			continue
		}
		rightPos := s.next
		right := syms[rightPos]
		if m, ok := merges.get(s.id, right.id); !ok || m.id != top.id {
			continue
		}
		s.id = top.id
		s.next = right.next
		syms[rightPos].id = -1
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if s.prev >= 0 {
			if m, ok := merges.get(syms[s.prev].id, s.id); ok {
				h.push(candidate{rank: m.rank, pos: s.prev, id: m.id})
			}
		}
		if s.next >= 0 {
			if m, ok := merges.get(s.id, syms[s.next].id); ok {
				h.push(candidate{rank: m.rank, pos: top.pos, id: m.id})
			}
		}
	}
	return h
}

// candidateHeap is a binary min-heap ordered by (rank, pos), written out rather than
// through container/heap to avoid interface calls on the hot path.
type candidateHeap []candidate

func (c candidate) less(o candidate) bool {
	return c.rank < o.rank || (c.rank == o.rank && c.pos < o.pos)
}

func (h *candidateHeap) push(c candidate) {
	s := append(*h, c)
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
	*h = s
}

func (h *candidateHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].less(s[l]) {
			m = r
		}
		if !s[m].less(s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// wordCache remembers the ids of recently seen pre-tokens: natural text repeats a
// small set of words, and a map lookup is several times cheaper than merging. It is
// bounded: a shard that reaches its share of the capacity is emptied and refills
// with what is current, which costs one re-merge per evicted word and needs no
// bookkeeping per hit. Safe for concurrent use; sharding keeps the server's parallel
// requests from serialising on one mutex.
type wordCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]cacheShard
}

const (
	cacheShards = 32
	// cacheCapacity bounds the words kept in all shards together. Cached words are at
	// most maxCachedWord bytes, so the cache holds at most a few MB.
	cacheCapacity = 1 << 15
	maxCachedWord = 64
)

type cacheShard struct {
	mu sync.Mutex
	m  map[string][]int32 // guarded by mu; values are never modified after insertion
}

func newWordCache(capacity int) *wordCache {
	c := &wordCache{seed: maphash.MakeSeed(), perShard: max(1, capacity/cacheShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int32)
	}
	return c
}

func (c *wordCache) shard(word string) *cacheShard {
	return &c.shards[maphash.String(c.seed, word)%cacheShards]
}

func (c *wordCache) get(word string) ([]int32, bool) {
	s := c.shard(word)
	s.mu.Lock()
	ids, ok := s.m[word]
	s.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	s := c.shard(word)
	s.mu.Lock()
	if len(s.m) >= c.perShard {
		clear(s.m)
	}
	s.m[word] = ids
	s.mu.Unlock()
}

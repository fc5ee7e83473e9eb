package tokenizer

import (
	"hash/maphash"
	"math/bits"
	"strings"
)

// The tables below hold a 150k-token vocabulary in a few flat slices. Go's own
// []string and maps cost a header, an allocation and a map slot per token: 20 MB of
// live heap for Qwen3's vocabulary and merges, which `serve` kept for its whole life
// and which the garbage collector's heap goal doubles. These take about 8 MB.

// strtab is a list of strings stored as one.
type strtab struct {
	blob string
	off  []uint32 // string i is blob[off[i]:off[i+1]]
}

// newStrtab stores n strings, string i being at(i).
func newStrtab(n int, at func(i int) string) strtab {
	size := 0
	for i := range n {
		size += len(at(i))
	}
	var b strings.Builder
	b.Grow(size)
	off := make([]uint32, n+1)
	for i := range n {
		b.WriteString(at(i))
		off[i+1] = uint32(b.Len())
	}
	return strtab{blob: b.String(), off: off}
}

func (s *strtab) len() int { return len(s.off) - 1 }

func (s *strtab) at(i int32) string { return s.blob[s.off[i]:s.off[i+1]] }

// slotsFor returns the slot count of an open-addressing table for n keys: a power of
// two at most three-quarters full, so that linear probes stay short.
func slotsFor(n int) int {
	return 1 << bits.Len(uint(n+n/3+1))
}

// tokenIndex maps a token's stored form to its id: an open-addressing table of ids
// whose keys are the strtab's strings.
type tokenIndex struct {
	seed  maphash.Seed
	slots []int32 // id + 1; 0 is empty
	mask  uint64
}

func newTokenIndex(n int) tokenIndex {
	slots := slotsFor(n)
	return tokenIndex{seed: maphash.MakeSeed(), slots: make([]int32, slots), mask: uint64(slots - 1)}
}

// find returns the id of the token whose stored form is s.
func (x *tokenIndex) find(tokens *strtab, s string) (int32, bool) {
	for i := maphash.String(x.seed, s) & x.mask; ; i = (i + 1) & x.mask {
		v := x.slots[i]
		if v == 0 {
			return 0, false
		}
		if tokens.at(v-1) == s {
			return v - 1, true
		}
	}
}

// insert adds id, whose stored form is tokens.at(id); if another id has the same
// form, it returns that id and false instead.
func (x *tokenIndex) insert(tokens *strtab, id int32) (int32, bool) {
	s := tokens.at(id)
	for i := maphash.String(x.seed, s) & x.mask; ; i = (i + 1) & x.mask {
		v := x.slots[i]
		if v == 0 {
			x.slots[i] = id + 1
			return id, true
		}
		if tokens.at(v-1) == s {
			return v - 1, false
		}
	}
}

// mergeTable is the merge list, looked up by the pair of ids it merges: an
// open-addressing table of ranks over the list's pairs and results. The rank is the
// merge's position in the list.
type mergeTable struct {
	slots  []int32  // rank + 1; 0 is empty
	shift  uint     // 64 - log2(len(slots)): the hash is the product's top bits
	pairs  []uint64 // pairKey of merge r
	result []int32  // id merge r produces
}

func newMergeTable(n int) mergeTable {
	slots := slotsFor(n)
	return mergeTable{
		slots:  make([]int32, slots),
		shift:  uint(64 - bits.TrailingZeros(uint(slots))),
		pairs:  make([]uint64, 0, n),
		result: make([]int32, 0, n),
	}
}

// home is the first slot to probe for key: Fibonacci hashing, which spreads ids that
// differ only in their low bits across the whole table.
func (m *mergeTable) home(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> m.shift }

// get returns the merge of the pair (a, b).
func (m *mergeTable) get(a, b int32) (mergeRule, bool) {
	key := pairKey(a, b)
	mask := uint64(len(m.slots) - 1)
	for i := m.home(key); ; i = (i + 1) & mask {
		v := m.slots[i]
		if v == 0 {
			return mergeRule{}, false
		}
		if m.pairs[v-1] == key {
			return mergeRule{rank: v - 1, id: m.result[v-1]}, true
		}
	}
}

// add appends the next merge of the list, (a, b) → id, unless the pair is already
// there: then it returns the earlier merge's rank and false.
func (m *mergeTable) add(a, b, id int32) (int32, bool) {
	key := pairKey(a, b)
	mask := uint64(len(m.slots) - 1)
	for i := m.home(key); ; i = (i + 1) & mask {
		v := m.slots[i]
		if v == 0 {
			m.pairs = append(m.pairs, key)
			m.result = append(m.result, id)
			m.slots[i] = int32(len(m.pairs))
			return int32(len(m.pairs) - 1), true
		}
		if m.pairs[v-1] == key {
			return v - 1, false
		}
	}
}

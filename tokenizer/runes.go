package tokenizer

import "sort"

// runeRanges is a sorted list of inclusive code point ranges (bert_tables.go).
type runeRanges [][2]rune

func (rr runeRanges) has(r rune) bool {
	i := sort.Search(len(rr), func(i int) bool { return rr[i][1] >= r })
	return i < len(rr) && rr[i][0] <= r
}

// lowerTable maps each code point whose lowercase differs from it to that lowercase
// (which may be longer: U+0130 becomes "i̇"), sorted by code point.
type lowerTable []struct {
	r     rune
	lower string
}

func (t lowerTable) get(r rune) (string, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].r >= r })
	if i < len(t) && t[i].r == r {
		return t[i].lower, true
	}
	return "", false
}

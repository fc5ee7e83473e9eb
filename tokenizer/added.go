package tokenizer

import (
	"sort"
	"strings"
)

// addedToken is a control or user-defined token, matched in raw text by its literal.
type addedToken struct {
	text    string
	id      int32
	control bool
}

// addedMatcher finds added tokens in text the way HF's AddedVocabulary does: an
// Aho-Corasick search with leftmost-longest semantics over the literals, so the
// earliest match wins and, among matches at one position, the longest; the search
// resumes after the match. Vocabularies have a few dozen added tokens, so instead of
// an automaton it keeps, per first byte, the literals longest first.
type addedMatcher struct {
	byFirst [256][]addedToken
	// firstByte is the only byte any literal starts with when onlyFirst is set (Qwen:
	// '<'), which lets find skip through text with strings.IndexByte.
	firstByte byte
	onlyFirst bool
	none      bool
}

func newAddedMatcher(tokens []addedToken) addedMatcher {
	var m addedMatcher
	firsts := 0
	for _, tok := range tokens {
		c := tok.text[0]
		if len(m.byFirst[c]) == 0 {
			firsts++
			m.firstByte = c
		}
		m.byFirst[c] = append(m.byFirst[c], tok)
	}
	for _, list := range m.byFirst {
		sort.SliceStable(list, func(i, j int) bool { return len(list[i].text) > len(list[j].text) })
	}
	m.none = firsts == 0
	m.onlyFirst = firsts == 1
	return m
}

// find returns the leftmost-longest added token at or after text[from:].
func (m *addedMatcher) find(text string, from int) (int, addedToken, bool) {
	if m.none {
		return 0, addedToken{}, false
	}
	for i := from; i < len(text); i++ {
		if m.onlyFirst {
			k := strings.IndexByte(text[i:], m.firstByte)
			if k < 0 {
				break
			}
			i += k
		}
		for _, tok := range m.byFirst[text[i]] {
			if strings.HasPrefix(text[i:], tok.text) {
				return i, tok, true
			}
		}
	}
	return 0, addedToken{}, false
}

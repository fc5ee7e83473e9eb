package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	tiktoken "github.com/tiktoken-go/tokenizer"
)

// cl100kSize is tiktoken's n_vocab for cl100k_base: 100256 ordinary tokens (ids 0 to
// 100255) and special tokens up to <|endofprompt|> (100276). Ids 100256 and 100261 to
// 100275 are assigned to nothing.
const cl100kSize = 100277

// cl100kOrdinary is the number of ordinary (BPE) tokens, ids 0 to 100255.
const cl100kOrdinary = 100256

// Cl100k decodes token ids of OpenAI's cl100k_base encoding, which is what LangChain's
// OpenAIEmbeddings sends by default (it tokenizes with tiktoken before calling the
// API). The server turns such ids back into text and tokenizes that text with Qwen3's
// tokenizer. Safe for concurrent use.
type Cl100k struct {
	pieces []string // bytes of each id; "" for an unassigned one
}

// cl100kPieces builds the id-to-bytes table once per process: it costs tens of
// milliseconds and about 10 MB, and every Cl100k can share it read-only.
var cl100kPieces = sync.OnceValues(func() ([]string, error) {
	codec, err := tiktoken.Get(tiktoken.Cl100kBase)
	if err != nil {
		return nil, fmt.Errorf("cl100k: %w", err)
	}
	codec.SetErrorMode(tiktoken.ErrorModeNone) // keep partial characters as raw bytes
	pieces := make([]string, cl100kSize)
	for id := range pieces {
		// The library's Decode reports an id it has no token for as an error; those
		// are the unassigned ids and its special tokens, handled below.
		if s, err := codec.Decode([]uint{uint(id)}); err == nil {
			pieces[id] = s
		}
	}
	// tiktoken's decode writes special tokens as their literal text. Routing then
	// tokenizes that text as Qwen3 text: control tokens never come from user input.
	for text, id := range map[string]int{
		"<|endoftext|>":   100257,
		"<|fim_prefix|>":  100258,
		"<|fim_middle|>":  100259,
		"<|fim_suffix|>":  100260,
		"<|endofprompt|>": 100276,
	} {
		pieces[id] = text
	}
	for id := 0; id < cl100kOrdinary; id++ {
		if pieces[id] == "" {
			return nil, fmt.Errorf("cl100k: the tiktoken-go vocabulary has no token %d; expected %d ordinary tokens", id, cl100kOrdinary)
		}
	}
	return pieces, nil
})

// NewCl100k returns a decoder for cl100k_base ids. The vocabulary is embedded in the
// tiktoken-go module; nothing is read from disk or the network.
func NewCl100k() (*Cl100k, error) {
	pieces, err := cl100kPieces()
	if err != nil {
		return nil, err
	}
	return &Cl100k{pieces: pieces}, nil
}

// Decode returns the text of ids. It fails, naming the position and the id, on an id
// that cl100k_base does not assign (negative, at least 100277, or in one of its gaps),
// and on ids whose bytes are not valid UTF-8 as a whole, since that text could not be
// embedded faithfully (a client cut a character in half, or sent ids of some other
// encoding).
func (c *Cl100k) Decode(ids []int64) (string, error) {
	var b strings.Builder
	starts := make([]int, len(ids)) // byte offset of each token in the result
	for i, id := range ids {
		if id < 0 || id >= cl100kSize {
			return "", fmt.Errorf("cl100k: token %d is id %d, outside cl100k_base's range 0 to %d", i, id, cl100kSize-1)
		}
		piece := c.pieces[id]
		if piece == "" {
			return "", fmt.Errorf("cl100k: token %d is id %d, which cl100k_base does not assign", i, id)
		}
		starts[i] = b.Len()
		b.WriteString(piece)
	}
	text := b.String()
	if utf8.ValidString(text) {
		return text, nil
	}
	bad := firstInvalidUTF8(text)
	tok := sort.Search(len(starts), func(i int) bool { return starts[i] > bad }) - 1
	return "", fmt.Errorf("cl100k: the ids do not decode to valid UTF-8: byte %d of the text, in token %d (id %d), is not part of a complete character; were the ids cut in the middle of a character, or made with another encoding?", bad, tok, ids[tok])
}

// firstInvalidUTF8 returns the byte offset of the first invalid sequence in s, which
// must hold one.
func firstInvalidUTF8(s string) int {
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			return i
		}
		i += w
	}
	return len(s)
}

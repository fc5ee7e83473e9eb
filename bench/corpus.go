package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/embed-stack/embed-stack/routing"
)

// Tokenizer is what Corpus needs of the model's tokenizer: the server's own (package
// tokenizer), so that a text cut here has exactly the wanted length there.
type Tokenizer interface {
	Encode(text string) []int32
	Decode(ids []int32) (string, error)
}

// Input is one text a target embeds. Text is what a server is sent; Tokens is what
// it must embed: Text tokenized, in the special tokens the model frames every input
// in (Qwen3's end-of-text id after it, BERT's [CLS] before and [SEP] after). The
// floor is fed Tokens directly.
type Input struct {
	Text   string
	Tokens []int32
}

// CorpusFile is the text benchmarks are cut from, relative to the repository root:
// Newton's Opticks (1730), public domain, about 130k Qwen3 tokens of English prose
// (see testdata/corpus/README.md).
const CorpusFile = "testdata/corpus/opticks.txt"

// ReadCorpus reads CorpusFile under the repository root.
func ReadCorpus(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, CorpusFile))
	if err != nil {
		return "", fmt.Errorf("bench: corpus: %w", err)
	}
	return string(b), nil
}

// Corpus cuts texts of exact token counts from a long text. Successive cuts take
// successive stretches of the text (wrapping around at its end), so inputs of one
// request, and of successive requests, differ: no target can serve a repeat from a
// cache. A Corpus is not safe for concurrent use.
type Corpus struct {
	tok     Tokenizer
	ids     []int32 // the whole text's tokens
	next    int     // where the next cut starts
	prompts routing.Prompts
	frame   routing.Frame
}

// NewCorpus tokenizes text once, for a Qwen3-Embedding model. Queries are wrapped
// with instruction (Qwen3's "Instruct: {task}\nQuery:{text}"); "" means
// routing.DefaultInstruction.
func NewCorpus(tok Tokenizer, text, instruction string) (*Corpus, error) {
	p := routing.Qwen3Prompts
	if instruction != "" {
		p.Instruction = instruction
	}
	return NewModelCorpus(tok, text, p, routing.Qwen3Frame)
}

// NewModelCorpus tokenizes text once, for a model of any family: queries and
// documents are wrapped in prompts (the query with prompts.Instruction where it
// takes one) and their tokens framed in frame, as the server does for that model
// (modelinfo.Facts: Prompts and Frame).
func NewModelCorpus(tok Tokenizer, text string, prompts routing.Prompts, frame routing.Frame) (*Corpus, error) {
	ids := tok.Encode(text)
	if len(ids) < 64 {
		return nil, fmt.Errorf("bench: the corpus is only %d tokens; give a longer text", len(ids))
	}
	if frame.Text == "" {
		frame = routing.Qwen3Frame
	}
	return &Corpus{tok: tok, ids: ids, prompts: prompts, frame: frame}, nil
}

// framed returns ids in f's special tokens, in a new array.
func framed(f routing.Frame, ids []int32) []int32 {
	out := make([]int32, 0, len(f.Head)+len(ids)+len(f.Tail))
	return append(append(append(out, f.Head...), ids...), f.Tail...)
}

// Tokens is the corpus length in tokens.
func (c *Corpus) Tokens() int { return len(c.ids) }

// Document returns a document of exactly n tokens, its frame's special tokens
// included.
func (c *Corpus) Document(n int) (Input, error) { return c.cut(n, routing.Document) }

// Query returns a query of exactly n tokens once wrapped in the query prompt, its
// frame's special tokens included. Its Text is the wrapped text: servers are sent it
// as a document, so that every server embeds the same tokens whether or not it knows
// the model's query prompt.
func (c *Corpus) Query(n int) (Input, error) { return c.cut(n, routing.Query) }

// Documents returns k documents of n tokens each.
func (c *Corpus) Documents(k, n int) ([]Input, error) { return c.many(k, n, routing.Document) }

// Queries returns k queries of n tokens each.
func (c *Corpus) Queries(k, n int) ([]Input, error) { return c.many(k, n, routing.Query) }

func (c *Corpus) many(k, n int, typ routing.InputType) ([]Input, error) {
	out := make([]Input, k)
	for i := range out {
		in, err := c.cut(n, typ)
		if err != nil {
			return nil, err
		}
		out[i] = in
	}
	return out, nil
}

// errNoCut is returned when no stretch near the cursor re-tokenizes to the length.
var errNoCut = errors.New("bench: no corpus cut re-tokenizes to the wanted length")

// cut finds text whose tokens, once wrapped and framed, number exactly n.
// Decoding a run of corpus tokens and encoding it again gives the same run except
// near its ends (a word cut in two may merge differently), so the run's length is
// corrected a few times; a start that does not converge is moved on by a token.
func (c *Corpus) cut(n int, typ routing.InputType) (Input, error) {
	instruction := c.prompts.Instruction
	prefix := c.prompts.Wrap(typ, instruction, "")
	want := n - c.frame.Len() // the text's own tokens; the server adds the frame
	body := want
	if prefix != "" {
		body -= len(c.tok.Encode(prefix))
	}
	if body < 1 {
		return Input{}, fmt.Errorf("bench: a %s of %d tokens leaves no room for text after its wrapping and special tokens", typ, n)
	}
	if body+8 > len(c.ids) {
		return Input{}, fmt.Errorf("bench: a %s of %d tokens is longer than the corpus (%d tokens)", typ, n, len(c.ids))
	}
	for shift := 0; shift < 64; shift++ {
		start := c.next + shift
		if start+body+8 > len(c.ids) {
			start = shift // wrap around to the beginning
		}
		j := body
		for range 8 {
			if j < 1 || start+j > len(c.ids) {
				break
			}
			text, err := c.tok.Decode(c.ids[start : start+j])
			if err != nil {
				break
			}
			text = c.prompts.Wrap(typ, instruction, text)
			ids := c.tok.Encode(text)
			if len(ids) == want {
				c.next = start + j
				return Input{Text: text, Tokens: framed(c.frame, ids)}, nil
			}
			j += want - len(ids)
		}
	}
	return Input{}, fmt.Errorf("%w (%s of %d tokens near corpus token %d)", errNoCut, typ, n, c.next)
}

package routing

import (
	"fmt"
	"strings"
)

// InputType says whether a text is a search query or a document. Retrieval models are
// asymmetric: each type gets its family's prompt (Prompts); Qwen3-Embedding's
// queries carry an instruction and its documents are embedded raw.
type InputType int

const (
	// Document is the zero value: text after the document prompt (none for Qwen3).
	Document InputType = iota
	// Query: text after the query prompt, for Qwen3 "Instruct: {task}\nQuery:{text}".
	Query
)

func (t InputType) String() string {
	if t == Query {
		return "query"
	}
	return "document"
}

// ParseInputType accepts "query", "document" and "passage" (a synonym for document
// used by several retrieval libraries), case-insensitively.
func ParseInputType(s string) (InputType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "query":
		return Query, nil
	case "document", "passage":
		return Document, nil
	}
	return Document, fmt.Errorf("input_type %q is not one of 'query', 'document', 'passage'", s)
}

// DefaultInstruction is the task the Qwen3-Embedding authors use for web search
// queries when the caller gives none.
const DefaultInstruction = "Given a web search query, retrieve relevant passages that answer the query"

// EOS is Qwen3's <|endoftext|>. The model was trained with it closing every
// sequence and pools the last token, so the server appends it itself whatever the
// GGUF's add_eos_token says; user text can never produce it (control tokens in text
// are tokenized as plain text).
const EOS int32 = 151643

// Prompts are a model family's prompt convention: the text before a query and
// before a document. Query may hold InstructionPlaceholder, where the request's
// instruction (or Instruction) goes; a Query without it takes no instruction, and a
// request that gives one is refused rather than embedded without it. The zero value
// (no Family) is Qwen3-Embedding's (Qwen3Prompts).
type Prompts struct {
	// Family names the convention in messages ("qwen3", "nomic", "e5").
	Family string
	// Query prefixes a query; Instruction is its default instruction.
	Query, Instruction string
	// Document prefixes a document.
	Document string
}

// InstructionPlaceholder is where a Prompts.Query template takes the instruction.
const InstructionPlaceholder = "{instruction}"

// Qwen3Prompts are Qwen3-Embedding's: "Instruct: {task}\nQuery:{text}" for a
// query, with no space after "Query:" exactly as in the model card's reference
// code; documents are embedded as they are.
var Qwen3Prompts = Prompts{Family: "qwen3", Query: "Instruct: " + InstructionPlaceholder + "\nQuery:", Instruction: DefaultInstruction}

// orQwen3 is p, or Qwen3Prompts for the zero value.
func (p Prompts) orQwen3() Prompts {
	if p.Family == "" {
		return Qwen3Prompts
	}
	return p
}

// TakesInstruction says whether a query's prompt has room for an instruction.
func (p Prompts) TakesInstruction() bool {
	return strings.Contains(p.orQwen3().Query, InstructionPlaceholder)
}

// Prefix is the text before the user's text for an input of type t.
func (p Prompts) Prefix(t InputType, instruction string) string {
	p = p.orQwen3()
	if t != Query {
		return p.Document
	}
	return strings.ReplaceAll(p.Query, InstructionPlaceholder, instruction)
}

// Wrap returns the text the model sees for one input.
func (p Prompts) Wrap(t InputType, instruction, text string) string {
	return p.Prefix(t, instruction) + text
}

// Wrap returns the text Qwen3-Embedding sees for one input (Qwen3Prompts.Wrap).
func Wrap(t InputType, instruction, text string) string {
	return Qwen3Prompts.Wrap(t, instruction, text)
}

// Frame is the special tokens around every input, after its prompt is tokenized:
// Head before (BERT's [CLS], XLM-R's <s>), Tail after (BERT's [SEP], XLM-R's </s>,
// Qwen3's <|endoftext|>). They are written as ids, never tokenized from text, so
// user text cannot produce them. The zero value (no Text) is Qwen3-Embedding's
// (Qwen3Frame).
type Frame struct {
	Head, Tail []int32
	// Sep goes between the two texts of a cross-encoder's pair, as Hugging Face's
	// post-processor joins a pair: BERT's [SEP] (`[CLS] a [SEP] b [SEP]`),
	// XLM-R's </s></s> (`<s> a </s></s> b </s>`).
	Sep []int32
	// Text names the tokens in messages: "<|endoftext|>", "[CLS] and [SEP]".
	Text string
}

// Qwen3Frame closes every input with <|endoftext|> (EOS).
var Qwen3Frame = Frame{Tail: []int32{EOS}, Text: "<|endoftext|>"}

// orQwen3 is f, or Qwen3Frame for the zero value.
func (f Frame) orQwen3() Frame {
	if f.Text == "" {
		return Qwen3Frame
	}
	return f
}

// Len is the number of tokens f adds to an input.
func (f Frame) Len() int {
	f = f.orQwen3()
	return len(f.Head) + len(f.Tail)
}

// pair returns the ids of a cross-encoder's pair a, b in f's tokens.
func (f Frame) pair(a, b []int32) []int32 {
	out := make([]int32, 0, len(f.Head)+len(a)+len(f.Sep)+len(b)+len(f.Tail))
	return append(append(append(append(append(out, f.Head...), a...), f.Sep...), b...), f.Tail...)
}

// around returns ids in f's tokens, reusing ids' array when it has room.
func (f Frame) around(ids []int32) []int32 {
	f = f.orQwen3()
	if len(f.Head) == 0 {
		return append(ids, f.Tail...)
	}
	out := make([]int32, 0, len(f.Head)+len(ids)+len(f.Tail))
	return append(append(append(out, f.Head...), ids...), f.Tail...)
}

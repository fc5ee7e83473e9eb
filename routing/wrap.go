package routing

import (
	"fmt"
	"strings"
)

// InputType says whether a text is a search query or a document. Qwen3-Embedding is
// asymmetric: queries carry an instruction, documents are embedded raw.
type InputType int

const (
	// Document is the zero value: text is embedded as it is.
	Document InputType = iota
	// Query wraps text as "Instruct: {task}\nQuery:{text}".
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

// Wrap returns the text the model sees for one input. There is no space after
// "Query:", exactly as in the model card's reference code.
func Wrap(t InputType, instruction, text string) string {
	if t != Query {
		return text
	}
	return "Instruct: " + instruction + "\nQuery:" + text
}

// queryPrefix is Wrap's text before the user's text, for inputs given as token ids.
func queryPrefix(instruction string) string {
	return "Instruct: " + instruction + "\nQuery:"
}

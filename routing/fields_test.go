package routing

import (
	"errors"
	"slices"
	"testing"
)

// TestInstructionImpliesQuery: an instruction with no input type makes the inputs
// queries with that task, even under a document default; with an explicit document
// it is ignored.
func TestInstructionImpliesQuery(t *testing.T) {
	r := &Router{Config: Config{Dim: 4}, Tokenizer: byteTokenizer{}}
	task := "Find code"
	for _, c := range []struct {
		name      string
		inputType string
		want      string
	}{
		{"no input type", "", Wrap(Query, task, "x")},
		{"explicit query", "query", Wrap(Query, task, "x")},
		{"explicit document", "document", "x"},
	} {
		seqs, err := r.Prepare(&Request{Texts: []string{"x"}, InputType: c.inputType, Instruction: &task})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := append(byteTokenizer{}.Encode(c.want), EOS)
		if !slices.Equal(seqs[0], want) {
			t.Errorf("%s: embedded %q, want %q", c.name, string(toBytes(seqs[0][:len(seqs[0])-1])), c.want)
		}
	}
}

func toBytes(ids []int32) []byte {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return b
}

// TestInputFieldNamesErrors: errors about the inputs name the request's own field:
// OpenAI's "input 1" by default, "texts[1]" for POST /embed, 'text' for /tokenize's
// single string.
func TestInputFieldNamesErrors(t *testing.T) {
	r := &Router{Config: Config{Dim: 4, MaxInputs: 2, MaxInputTokens: 8}, Tokenizer: byteTokenizer{}}
	for _, c := range []struct {
		field string
		texts []string
		param string
		msg   string
	}{
		{"", []string{"a", ""}, "input", "input 1 is an empty string; every input must hold text."},
		{"texts", []string{"a", ""}, "texts", "texts[1] is an empty string; every input must hold text."},
		{"texts", nil, "texts", "'texts' must not be empty."},
		{"texts", []string{"a", "b", "c"}, "texts", "'texts' holds 3 inputs; the limit is 2 per request. Split the request."},
		{"texts", []string{"a", "123456789"}, "texts", "This model's maximum context length is 8 tokens, however you requested 10 tokens (10 in your prompt; 0 for the completion) in texts[1]. Please reduce your prompt; or completion length."},
		{"text", []string{""}, "text", "'text' is an empty string; every input must hold text."},
	} {
		_, err := r.Prepare(&Request{Texts: c.texts, InputField: c.field})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Param != c.param || ie.Message != c.msg {
			t.Errorf("field %q %q: got %v, want param %q message %q", c.field, c.texts, err, c.param, c.msg)
		}
	}
}

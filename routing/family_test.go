package routing

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// bertFrame and nomicPrompts are a BERT encoder's frame ([CLS] text [SEP]) and
// nomic-embed-text's task prefixes, with byteTokenizer's ids.
var (
	bertFrame    = Frame{Head: []int32{101}, Tail: []int32{102}, Text: "[CLS] and [SEP]"}
	nomicPrompts = Prompts{Family: "nomic", Query: InstructionPlaceholder + ": ", Instruction: "search_query", Document: "search_document: "}
	e5Prompts    = Prompts{Family: "e5", Query: "query: ", Document: "passage: "}
)

func framed(head, tail int32, s string) []int32 {
	return append(append([]int32{head}, byteTokenizer{}.Encode(s)...), tail)
}

// TestFamilyPrompts: each input type gets its family's prompt, the request's
// instruction goes where the query prompt says, and every input is framed in the
// model's special tokens (ids, never text).
func TestFamilyPrompts(t *testing.T) {
	instr := "classification"
	for _, tt := range []struct {
		name    string
		prompts Prompts
		req     Request
		want    [][]int32
	}{
		{"nomic document (the default input type)", nomicPrompts, Request{Texts: []string{"a b"}},
			[][]int32{framed(101, 102, "search_document: a b")}},
		{"nomic query: the default task", nomicPrompts, Request{Texts: []string{"x"}, InputType: "query"},
			[][]int32{framed(101, 102, "search_query: x")}},
		{"nomic: the instruction is the task", nomicPrompts, Request{Texts: []string{"x"}, Instruction: &instr},
			[][]int32{framed(101, 102, "classification: x")}},
		{"e5 passage", e5Prompts, Request{Texts: []string{"x"}, InputType: "passage"},
			[][]int32{framed(101, 102, "passage: x")}},
		{"e5 query", e5Prompts, Request{Texts: []string{"x"}, InputType: "query"},
			[][]int32{framed(101, 102, "query: x")}},
		{"no prompts", Prompts{Family: "none"}, Request{Texts: []string{"x"}, InputType: "query"},
			[][]int32{framed(101, 102, "x")}},
		{"native token ids get the prompt and the frame", e5Prompts, Request{TokenIDs: [][]int64{{7, 8}}, InputType: "query"},
			[][]int32{append(append([]int32{101}, byteTokenizer{}.Encode("query: ")...), 7, 8, 102)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _, _ := newRouter(Config{Dim: 4, Prompts: tt.prompts, Frame: bertFrame, TokenIDs: TokenIDsNative})
			got, err := r.Prepare(&tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("Prepare = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestFamilyInstructionRefused: a family whose query prompt has no room for an
// instruction refuses one rather than embedding the query without it.
func TestFamilyInstructionRefused(t *testing.T) {
	r, _, _ := newRouter(Config{Dim: 4, Prompts: e5Prompts, Frame: bertFrame})
	instr := "find it"
	_, err := r.Prepare(&Request{Texts: []string{"x"}, Instruction: &instr})
	var ie *InputError
	want := `This model's query prompt (e5: "query: ") takes no instruction; omit 'instruction', or give the model a query prompt with {instruction} (--query-prompt).`
	if !errors.As(err, &ie) || ie.Param != "instruction" || ie.Message != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// TestFamilyLimits: the per-input limit counts the frame's two tokens, and
// truncation keeps the prompt and the frame whole.
func TestFamilyLimits(t *testing.T) {
	r, warm, _ := newRouter(Config{Dim: 4, Prompts: e5Prompts, Frame: bertFrame, MaxInputTokens: 16, WarmMaxTokens: 16})
	// "passage: " is 9 bytes: 9 + 5 + 2 = 16 fits, 9 + 6 + 2 = 17 does not.
	if _, err := r.Embed(context.Background(), &Request{Texts: []string{"12345"}}); err != nil {
		t.Fatalf("16 tokens: %v", err)
	}
	_, err := r.Embed(context.Background(), &Request{Texts: []string{"123456"}})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Tokens != 17 || ie.Limit != 16 {
		t.Fatalf("17 tokens: err = %v, want the limit 16", err)
	}
	res, err := r.Embed(context.Background(), &Request{Texts: []string{"123456789"}, Truncate: TruncateEnd})
	if err != nil || res.Tokens != 16 {
		t.Fatalf("truncated: %v, %+v", err, res)
	}
	last := warm.calls[len(warm.calls)-1][0]
	if want := framed(101, 102, "passage: 12345"); !slices.Equal(last, want) {
		t.Errorf("truncated input %v, want %v", last, want)
	}
	_, err = r.Embed(context.Background(), &Request{Texts: []string{"x"}, InputType: "query", Truncate: TruncateEnd, Instruction: nil})
	if err != nil {
		t.Fatal(err)
	}
	r2, _, _ := newRouter(Config{Dim: 4, Prompts: Prompts{Family: "long", Document: "0123456789abcdef"}, Frame: bertFrame, MaxInputTokens: 16, WarmMaxTokens: 16})
	_, err = r2.Embed(context.Background(), &Request{Texts: []string{"x"}, Truncate: TruncateEnd})
	want := "input 0 cannot be truncated to 16 tokens and keep any of its text: the wrapping alone (the prompt and [CLS] and [SEP]) takes 18."
	if !errors.As(err, &ie) || ie.Message != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

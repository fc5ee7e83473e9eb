package routing

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

// logitBackend answers each sequence with [logit(yes), logit(no)] = [len/10, 1]:
// longer pairs score higher.
type logitBackend struct{ calls [][][]int32 }

func (b *logitBackend) Embed(_ context.Context, seqs [][]int32) ([][]float32, error) {
	b.calls = append(b.calls, seqs)
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = []float32{float32(len(s)) / 10, 1}
	}
	return out, nil
}

func rerankRouter(b Backend, c Config) *Router {
	c.Dim, c.Rerank = 2, true
	return &Router{Config: c, Tokenizer: byteTokenizer{}, Warm: b}
}

// TestRerankTemplate pins the token ids of a pair: the model card's prefix and
// suffix with the control tokens as ids, the pair text tokenized in between.
func TestRerankTemplate(t *testing.T) {
	b := &logitBackend{}
	r := rerankRouter(b, Config{})
	res, err := r.Rerank(context.Background(), &RerankRequest{Query: "q<|im_end|>", Documents: []string{"doc"}})
	if err != nil {
		t.Fatal(err)
	}
	enc := byteTokenizer{}.Encode
	want := join([]int32{ImStart}, enc("system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."),
		[]int32{ImEnd}, enc("\n"), []int32{ImStart}, enc("user\n"),
		enc("<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: q<|im_end|>\n<Document>: doc"),
		[]int32{ImEnd}, enc("\n"), []int32{ImStart}, enc("assistant\n"), []int32{Think}, enc("\n\n"), []int32{ThinkEnd}, enc("\n\n"))
	if len(b.calls) != 1 || !slices.Equal(b.calls[0][0], want) {
		t.Fatalf("sequence sent:\n%v\nwant\n%v", b.calls, want)
	}
	if res.Tokens != len(want) {
		t.Errorf("Tokens = %d, want %d", res.Tokens, len(want))
	}
	d := float64(len(want))/10 - 1
	if math.Abs(res.Logits[0]-d) > 1e-6 || math.Abs(res.Scores[0]-1/(1+math.Exp(-d))) > 1e-9 {
		t.Errorf("logit %v score %v; want %v and its sigmoid", res.Logits[0], res.Scores[0], d)
	}
}

func TestRerankRanked(t *testing.T) {
	r := rerankRouter(&logitBackend{}, Config{})
	instr := "Find it"
	res, err := r.Rerank(context.Background(), &RerankRequest{Query: "q", Documents: []string{"bb", "bbbb", "b", "bbbb"}, Instruction: &instr})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Ranked(0); !slices.Equal(got, []int{1, 3, 0, 2}) {
		t.Errorf("Ranked(0) = %v, want [1 3 0 2] (ties in input order)", got)
	}
	if got := res.Ranked(2); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("Ranked(2) = %v, want [1 3]", got)
	}
	if got := res.Ranked(9); len(got) != 4 {
		t.Errorf("Ranked(9) = %v, want all 4", got)
	}
}

func TestRerankErrors(t *testing.T) {
	empty := ""
	long := string(make([]byte, 400))
	tests := []struct {
		name  string
		cfg   Config
		req   RerankRequest
		param string
		index int
		code  string
	}{
		{"empty query", Config{}, RerankRequest{Query: " ", Documents: []string{"a"}}, "query", -1, CodeEmptyInput},
		{"no documents", Config{}, RerankRequest{Query: "q"}, "documents", -1, CodeEmptyInput},
		{"too many documents", Config{MaxInputs: 2}, RerankRequest{Query: "q", Documents: []string{"a", "b", "c"}}, "documents", -1, CodeTooManyInputs},
		{"empty instruction", Config{}, RerankRequest{Query: "q", Documents: []string{"a"}, Instruction: &empty}, "instruction", -1, CodeInvalidValue},
		{"pair too long", Config{MaxInputTokens: 500, WarmMaxTokens: 500}, RerankRequest{Query: "q", Documents: []string{"a", long}}, "documents", 1, CodeContextLength},
		{"too many tokens", Config{MaxTotalTokens: 500}, RerankRequest{Query: "q", Documents: []string{"a", "b"}}, "documents", -1, CodeTooManyTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &logitBackend{}
			_, err := rerankRouter(b, tt.cfg).Rerank(context.Background(), &tt.req)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Param != tt.param || ie.Index != tt.index || ie.Code != tt.code {
				t.Fatalf("err = %#v, want param %q index %d code %q", err, tt.param, tt.index, tt.code)
			}
			if len(b.calls) != 0 {
				t.Errorf("the backend was called for a refused request")
			}
		})
	}
}

// TestRerankTruncate: with Truncate a document whose pair is over the limit is
// cut (its end, or its beginning with TruncateStart) to the longest text whose
// pair fits, exactly the pair of that shorter document; the query is never cut,
// and a query too long for any document is still refused.
func TestRerankTruncate(t *testing.T) {
	const limit = 300
	doc := strings.Repeat("abcdefghij", 40) // 400 bytes: one token each
	cfg := Config{MaxInputTokens: limit, WarmMaxTokens: limit}
	pairLen := func(d string) int {
		b := &logitBackend{}
		if _, err := rerankRouter(b, Config{}).Rerank(context.Background(), &RerankRequest{Query: "q", Documents: []string{d}}); err != nil {
			t.Fatal(err)
		}
		return len(slices.Concat(b.calls...)[0])
	}
	frame := pairLen("") // the template and the query
	for _, tc := range []struct {
		dir  Truncation
		kept string
	}{
		{TruncateEnd, doc[:limit-frame]},
		{TruncateStart, doc[len(doc)-(limit-frame):]},
	} {
		b := &logitBackend{}
		res, err := rerankRouter(b, cfg).Rerank(context.Background(), &RerankRequest{Query: "q", Documents: []string{"short", doc}, Truncate: tc.dir})
		if err != nil {
			t.Fatalf("truncation %d: %v", tc.dir, err)
		}
		want := &logitBackend{}
		if _, err := rerankRouter(want, Config{}).Rerank(context.Background(), &RerankRequest{Query: "q", Documents: []string{"short", tc.kept}}); err != nil {
			t.Fatal(err)
		}
		got, exp := slices.Concat(b.calls...), slices.Concat(want.calls...)
		if len(got) != 2 || len(exp) != 2 {
			t.Fatalf("truncation %d: %d and %d pairs sent, want 2", tc.dir, len(got), len(exp))
		}
		if !slices.Equal(got[1], exp[1]) || len(got[1]) != limit || res.Tokens != len(exp[0])+limit {
			t.Errorf("truncation %d: pair of %d tokens (%d in all), want the %d of the document cut to %d bytes", tc.dir, len(got[1]), res.Tokens, limit, len(tc.kept))
		}
		if !slices.Equal(got[0], exp[0]) {
			t.Errorf("truncation %d: the short document's pair changed", tc.dir)
		}
	}
	_, err := rerankRouter(&logitBackend{}, cfg).Rerank(context.Background(), &RerankRequest{Query: doc, Documents: []string{"a"}, Truncate: TruncateEnd})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Code != CodeContextLength || ie.Index != 0 {
		t.Errorf("a query over the limit with truncation: %v, want the pair refused", err)
	}
}

// TestTaskMismatch: a reranker refuses embeddings and tokenization, an embedding
// model refuses rerank requests, each with a 400 naming the other endpoint.
func TestTaskMismatch(t *testing.T) {
	rr := rerankRouter(&logitBackend{}, Config{})
	_, err1 := rr.Embed(context.Background(), &Request{Texts: []string{"a"}})
	_, err2 := rr.Prepare(&Request{Texts: []string{"a"}})
	er := &Router{Config: Config{Dim: 64}, Tokenizer: byteTokenizer{}, Warm: &fakeBackend{dim: 64}}
	_, err3 := er.Rerank(context.Background(), &RerankRequest{Query: "q", Documents: []string{"a"}})
	for i, err := range []error{err1, err2, err3} {
		var ie *InputError
		if !errors.As(err, &ie) || ie.Code != CodeWrongTask || ie.Param != "model" {
			t.Errorf("case %d: err = %v, want an InputError with code %s", i, err, CodeWrongTask)
		}
	}
}

// TestRerankCrossEncoderPair pins a cross-encoder's pair: the Frame's head, the
// query, its Sep, the document and its tail, with no template; an instruction is
// refused, and the score is the sigmoid of the first output less the second.
func TestRerankCrossEncoderPair(t *testing.T) {
	b := &logitBackend{}
	fr := Frame{Head: []int32{101}, Sep: []int32{102}, Tail: []int32{102}, Text: "[CLS] and [SEP]"}
	r := rerankRouter(b, Config{CrossEncoder: true, Frame: fr})
	res, err := r.Rerank(context.Background(), &RerankRequest{Query: "q[SEP]", Documents: []string{"doc", ""}})
	if err != nil {
		t.Fatal(err)
	}
	enc := byteTokenizer{}.Encode
	want := [][]int32{join([]int32{101}, enc("q[SEP]"), []int32{102}, enc("doc"), []int32{102}), join([]int32{101}, enc("q[SEP]"), []int32{102, 102})}
	if len(b.calls) != 1 || !slices.EqualFunc(b.calls[0], want, slices.Equal) {
		t.Fatalf("sequences sent:\n%v\nwant\n%v", b.calls, want)
	}
	if res.Tokens != len(want[0])+len(want[1]) {
		t.Errorf("Tokens = %d, want %d", res.Tokens, len(want[0])+len(want[1]))
	}
	d := float64(len(want[0]))/10 - 1
	if math.Abs(res.Logits[0]-d) > 1e-6 || math.Abs(res.Scores[0]-1/(1+math.Exp(-d))) > 1e-6 {
		t.Errorf("logit %v score %v; want %v and its sigmoid", res.Logits[0], res.Scores[0], d)
	}
	instr := "judge"
	_, err = r.Rerank(context.Background(), &RerankRequest{Query: "q", Documents: []string{"d"}, Instruction: &instr})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Param != "instruction" || ie.Code != CodeInvalidValue {
		t.Errorf("an instruction to a cross-encoder: %v; want an InputError on instruction, %s", err, CodeInvalidValue)
	}
}

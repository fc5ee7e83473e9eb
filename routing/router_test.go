package routing

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// byteTokenizer maps every byte to its value as a token id: easy to reason about
// lengths and contents in tests. The real tokenizer is tested in package tokenizer
// and end to end in conformance.
type byteTokenizer struct{}

func (byteTokenizer) Encode(s string) []int32 {
	out := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int32(s[i])
	}
	return out
}
func (byteTokenizer) VocabSize() int { return 151669 }

// fakeBackend returns, for each sequence, a vector of dim values derived from the
// tokens, and records the calls it got.
type fakeBackend struct {
	dim   int
	mu    sync.Mutex
	calls [][][]int32
	err   error
	block chan struct{} // when set, Embed waits on it or ctx
	// hold, when set, is called with each call's index (0 first) before it answers.
	hold func(call int)
}

func vectorFor(seq []int32, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(len(seq)) + float32(i)*0.5
	}
	v[0] = float32(seq[0])
	return v
}

func (f *fakeBackend) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	f.mu.Lock()
	f.calls = append(f.calls, seqs)
	call := len(f.calls) - 1
	f.mu.Unlock()
	if f.hold != nil {
		f.hold(call)
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = vectorFor(s, f.dim)
	}
	return out, nil
}

type fakeLong struct{ b *fakeBackend }

func (l fakeLong) Embed(ctx context.Context, seq []int32) ([]float32, error) {
	v, err := l.b.Embed(ctx, [][]int32{seq})
	if err != nil {
		return nil, err
	}
	return v[0], nil
}

type fakeCl100k map[int64]string

func (f fakeCl100k) Decode(ids []int64) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		s, ok := f[id]
		if !ok {
			return "", fmt.Errorf("token id %d is not in cl100k_base", id)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

func newRouter(cfg Config) (*Router, *fakeBackend, *fakeBackend) {
	if cfg.Dim == 0 {
		cfg.Dim = 64
	}
	warm := &fakeBackend{dim: cfg.Dim}
	long := &fakeBackend{dim: cfg.Dim}
	return &Router{Config: cfg, Tokenizer: byteTokenizer{}, Warm: warm, Long: fakeLong{long},
		Cl100k: fakeCl100k{15339: "hello", 1917: " world"}}, warm, long
}

func withEOS(s string) []int32 { return append(byteTokenizer{}.Encode(s), EOS) }

func TestPrepareWrapping(t *testing.T) {
	custom := "Find the code"
	tests := []struct {
		name string
		cfg  Config
		req  Request
		want [][]int32
	}{
		{"default is document", Config{}, Request{Texts: []string{"abc"}}, [][]int32{withEOS("abc")}},
		{"query uses official task, no space after Query:", Config{}, Request{Texts: []string{"abc"}, InputType: "query"},
			[][]int32{withEOS("Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:abc")}},
		{"custom instruction", Config{}, Request{Texts: []string{"abc"}, InputType: "Query", Instruction: &custom},
			[][]int32{withEOS("Instruct: Find the code\nQuery:abc")}},
		{"instruction ignored for documents", Config{}, Request{Texts: []string{"abc"}, InputType: "document", Instruction: &custom},
			[][]int32{withEOS("abc")}},
		{"passage is document", Config{DefaultInputType: Query}, Request{Texts: []string{"abc"}, InputType: "passage"}, [][]int32{withEOS("abc")}},
		{"server default query", Config{DefaultInputType: Query, DefaultInstruction: "T"}, Request{Texts: []string{"a", "b"}},
			[][]int32{withEOS("Instruct: T\nQuery:a"), withEOS("Instruct: T\nQuery:b")}},
		{"native ids, document", Config{TokenIDs: TokenIDsNative}, Request{TokenIDs: [][]int64{{5, 151668}}}, [][]int32{{5, 151668, EOS}}},
		{"native ids, query gets the prefix", Config{TokenIDs: TokenIDsNative, DefaultInstruction: "T"}, Request{TokenIDs: [][]int64{{5}}, InputType: "query"},
			[][]int32{append(byteTokenizer{}.Encode("Instruct: T\nQuery:"), 5, EOS)}},
		{"cl100k ids are decoded then wrapped", Config{}, Request{TokenIDs: [][]int64{{15339, 1917}}, InputType: "query", Instruction: &custom},
			[][]int32{withEOS("Instruct: Find the code\nQuery:hello world")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _, _ := newRouter(tt.cfg)
			got, err := r.Prepare(&tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Fatalf("got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestPrepareErrors(t *testing.T) {
	empty := "  "
	long := strings.Repeat("x", 5000)
	tests := []struct {
		name  string
		cfg   Config
		req   Request
		param string
		code  string
		msg   string
	}{
		{"no inputs", Config{}, Request{}, "input", CodeEmptyInput, "'input' must not be empty."},
		{"too many inputs", Config{MaxInputs: 2}, Request{Texts: []string{"a", "b", "c"}}, "input", CodeTooManyInputs,
			"'input' holds 3 inputs; the limit is 2 per request. Split the request."},
		{"empty string", Config{}, Request{Texts: []string{"a", ""}}, "input", CodeEmptyInput, "input 1 is an empty string; every input must hold text."},
		{"bad input type", Config{}, Request{Texts: []string{"a"}, InputType: "search"}, "input_type", CodeInvalidValue,
			`input_type "search" is not one of 'query', 'document', 'passage'.`},
		{"blank instruction", Config{}, Request{Texts: []string{"a"}, Instruction: &empty}, "instruction", CodeInvalidValue,
			"'instruction' must not be empty; omit it to use the default task."},
		{"long instruction", Config{}, Request{Texts: []string{"a"}, Instruction: &long}, "instruction", CodeInvalidValue,
			"'instruction' is 5000 bytes; the limit is 4096."},
		{"over context", Config{MaxInputTokens: 10}, Request{Texts: []string{"ok", "0123456789"}}, "input", CodeContextLength,
			"This model's maximum context length is 10 tokens, however you requested 11 tokens (11 in your prompt; 0 for the completion) in input 1. Please reduce your prompt; or completion length."},
		{"over total", Config{MaxTotalTokens: 7}, Request{Texts: []string{"abc", "def"}}, "input", CodeTooManyTokens,
			"The request holds more than 7 tokens in all (the per-request limit) by input 1. Split the request."},
		{"ids refused", Config{TokenIDs: TokenIDsReject}, Request{TokenIDs: [][]int64{{1}}}, "input", CodeTokenIDsRefused,
			"This server does not accept token ids as input (--token-ids=reject); send text instead."},
		{"native id out of vocab", Config{TokenIDs: TokenIDsNative}, Request{TokenIDs: [][]int64{{1}, {3, 151669}}}, "input", CodeInvalidTokenID,
			"input 1 holds token id 151669 at position 1; valid ids are 0 to 151668."},
		{"native id negative", Config{TokenIDs: TokenIDsNative}, Request{TokenIDs: [][]int64{{-1}}}, "input", CodeInvalidTokenID,
			"input 0 holds token id -1 at position 0; valid ids are 0 to 151668."},
		{"cl100k unknown id", Config{}, Request{TokenIDs: [][]int64{{15339, 7}}}, "input", CodeInvalidTokenID,
			"input 0: token id 7 is not in cl100k_base (token ids are read as tiktoken cl100k_base; start the server with --token-ids=native to send Qwen3 ids)."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _, _ := newRouter(tt.cfg)
			_, err := r.Prepare(&tt.req)
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want *InputError", err)
			}
			if ie.Param != tt.param || ie.Code != tt.code || ie.Message != tt.msg {
				t.Fatalf("got  %q %q %q\nwant %q %q %q", ie.Param, ie.Code, ie.Message, tt.param, tt.code, tt.msg)
			}
		})
	}
}

// TestRoutingBoundaries checks the warm/ephemeral split at its exact edges: the
// limits count wrapped tokens with EOS.
func TestRoutingBoundaries(t *testing.T) {
	r, warm, long := newRouter(Config{WarmMaxTokens: 16, WarmChunkTokens: 100, MaxInputTokens: 32})
	texts := []string{
		strings.Repeat("a", 15), // 16 with EOS: warm
		strings.Repeat("b", 16), // 17: ephemeral
		strings.Repeat("c", 31), // 32: ephemeral
		"d",                     // 2: warm
	}
	res, err := r.Embed(context.Background(), &Request{Texts: texts})
	if err != nil {
		t.Fatal(err)
	}
	if len(warm.calls) != 1 || len(warm.calls[0]) != 2 || len(warm.calls[0][0]) != 16 || len(warm.calls[0][1]) != 2 {
		t.Fatalf("warm calls = %v", lens(warm.calls))
	}
	if got := lens(long.calls); !slices.Equal(sorted(got), []int{17, 32}) {
		t.Fatalf("long calls = %v, want 17 and 32 tokens", got)
	}
	if res.Tokens != 16+17+32+2 {
		t.Fatalf("tokens = %d", res.Tokens)
	}
	// Input order is kept: vector[0] holds the first token, before normalisation.
	for i, text := range texts {
		want := vectorFor(withEOS(text), 64)
		if cos := cosine(res.Vectors[i], want); cos < 1-1e-6 {
			t.Fatalf("input %d: cosine to its own vector %v", i, cos)
		}
	}

	warm.calls, long.calls = nil, nil
	_, err = r.Embed(context.Background(), &Request{Texts: []string{"ok", strings.Repeat("x", 32)}})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Code != CodeContextLength {
		t.Fatalf("33 tokens: err = %v", err)
	}
	if len(warm.calls)+len(long.calls) != 0 {
		t.Fatal("backends were called for a request refused at the limit")
	}
}

func TestNoLongBackendRefusesOverWarmLimit(t *testing.T) {
	r, _, _ := newRouter(Config{WarmMaxTokens: 4})
	r.Long = nil
	_, err := r.Embed(context.Background(), &Request{Texts: []string{"abcd"}})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Message != "input 0 has 5 tokens; this server embeds at most 4 tokens per input." {
		t.Fatalf("err = %v", err)
	}
}

func TestWarmChunking(t *testing.T) {
	r, warm, _ := newRouter(Config{WarmChunkTokens: 10})
	// 4 tokens each with EOS: chunks of 2, 2, 1.
	_, err := r.Embed(context.Background(), &Request{Texts: []string{"abc", "def", "ghi", "jkl", "mno"}})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, c := range warm.calls {
		sizes = append(sizes, len(c))
	}
	if !slices.Equal(sizes, []int{2, 2, 1}) {
		t.Fatalf("chunk sizes = %v, want [2 2 1]", sizes)
	}
}

// TestWarmChunkDefault checks the size of a request's warm calls when
// WarmChunkTokens is left at 0: with batching on, the batch budget, even where the
// warm worker's longest input (WarmMaxTokens) is smaller, as an encoder's 512
// is; each further call costs a round trip after which the worker wakes its
// threads again (docs/performance.md: 8 calls of 512 tokens for 32 x 128 on
// all-MiniLM-L6-v2 took 1.02 to 1.14 times as long as 2 of 2048). Without
// batching, the warm limit.
func TestWarmChunkDefault(t *testing.T) {
	texts := make([]string, 32)
	for i := range texts {
		texts[i] = strings.Repeat(string(rune('A'+i)), 127) // 128 tokens with EOS, each its own first token
	}
	for _, tt := range []struct {
		name string
		cfg  Config
		want []int
	}{
		{"batching, default budget", Config{WarmMaxTokens: 512, BatchWindow: time.Millisecond}, []int{16, 16}},
		{"batching, budget 1000", Config{WarmMaxTokens: 512, BatchWindow: time.Millisecond, BatchMaxTokens: 1000}, []int{7, 7, 7, 7, 4}},
		{"batching, warm limit above the budget", Config{WarmMaxTokens: 8192, BatchWindow: time.Millisecond}, []int{16, 16}},
		{"no batching: the warm limit", Config{WarmMaxTokens: 512}, []int{4, 4, 4, 4, 4, 4, 4, 4}},
		{"set explicitly", Config{WarmMaxTokens: 512, BatchWindow: time.Millisecond, WarmChunkTokens: 4096}, []int{32}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, warm, _ := newRouter(tt.cfg)
			res, err := r.Embed(context.Background(), &Request{Texts: texts})
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int
			for _, c := range warm.calls {
				sizes = append(sizes, len(c))
			}
			if !slices.Equal(sizes, tt.want) {
				t.Fatalf("warm calls of %v inputs, want %v", sizes, tt.want)
			}
			for i, text := range texts {
				if cos := cosine(res.Vectors[i], vectorFor(withEOS(text), 64)); cos < 1-1e-6 {
					t.Fatalf("input %d: cosine to its own vector %v", i, cos)
				}
			}
		})
	}
}

func TestDimensionsTruncateAndNormalise(t *testing.T) {
	r, _, _ := newRouter(Config{Dim: 64})
	full, err := r.Embed(context.Background(), &Request{Texts: []string{"abc"}})
	if err != nil {
		t.Fatal(err)
	}
	cut, err := r.Embed(context.Background(), &Request{Texts: []string{"abc"}, Dimensions: 32})
	if err != nil {
		t.Fatal(err)
	}
	raw := vectorFor(withEOS("abc"), 64)
	var n32, n64 float64
	for i, x := range raw {
		if i < 32 {
			n32 += float64(x) * float64(x)
		}
		n64 += float64(x) * float64(x)
	}
	for i := range 64 {
		if d := math.Abs(float64(full.Vectors[0][i]) - float64(raw[i])/math.Sqrt(n64)); d > 1e-7 {
			t.Fatalf("full[%d] off by %g", i, d)
		}
	}
	if len(cut.Vectors[0]) != 32 {
		t.Fatalf("len = %d", len(cut.Vectors[0]))
	}
	for i := range 32 {
		if d := math.Abs(float64(cut.Vectors[0][i]) - float64(raw[i])/math.Sqrt(n32)); d > 1e-7 {
			t.Fatalf("cut[%d] off by %g", i, d)
		}
	}
	for _, d := range []int{31, 65, -1} {
		_, err := r.Embed(context.Background(), &Request{Texts: []string{"abc"}, Dimensions: d})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Param != "dimensions" || ie.Message != fmt.Sprintf("'dimensions' must be between 32 and 64 for this model; got %d.", d) {
			t.Fatalf("dimensions %d: err = %v", d, err)
		}
	}
}

// Raw (TEI's "normalize": false) returns the pooled vector as the backend gave it,
// cut to dimensions, bit for bit.
func TestRawSkipsNormalisation(t *testing.T) {
	r, _, _ := newRouter(Config{Dim: 64})
	raw := vectorFor(withEOS("abc"), 64)
	for _, dims := range []int{0, 32} {
		res, err := r.Embed(context.Background(), &Request{Texts: []string{"abc"}, Dimensions: dims, Raw: true})
		if err != nil {
			t.Fatal(err)
		}
		want := raw
		if dims > 0 {
			want = raw[:dims]
		}
		if !slices.Equal(res.Vectors[0], want) {
			t.Fatalf("dimensions %d: raw vector %v, want %v", dims, res.Vectors[0][:4], want[:4])
		}
	}
}

func TestFailureCancelsOtherPaths(t *testing.T) {
	r, warm, long := newRouter(Config{WarmMaxTokens: 4})
	warm.block = make(chan struct{}) // the warm call waits until cancelled
	long.err = errors.New("worker crashed")
	_, err := r.Embed(context.Background(), &Request{Texts: []string{"a", "long input"}})
	if err == nil || !strings.Contains(err.Error(), "worker crashed") || !strings.Contains(err.Error(), "input 1 (11 tokens, ephemeral worker)") {
		t.Fatalf("err = %v", err)
	}
}

func TestBackendFaults(t *testing.T) {
	r, warm, _ := newRouter(Config{})
	warm.err = &UnavailableError{RetryAfter: 3}
	_, err := r.Embed(context.Background(), &Request{Texts: []string{"a"}})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.RetryAfter != 3 {
		t.Fatalf("retry hint lost: %v", err)
	}
}

func TestFinishRejectsBadVectors(t *testing.T) {
	for _, v := range [][]float32{{0, 0}, {float32(math.NaN()), 1}, {float32(math.Inf(1)), 1}} {
		if _, err := finish(v, 2, true); err == nil {
			t.Fatalf("finish(%v) accepted", v)
		}
	}
}

func lens(calls [][][]int32) []int {
	var out []int
	for _, c := range calls {
		for _, s := range c {
			out = append(out, len(s))
		}
	}
	return out
}

func sorted(s []int) []int { s = slices.Clone(s); slices.Sort(s); return s }

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// limitedByteTokenizer is byteTokenizer that stops, as package tokenizer's does.
type limitedByteTokenizer struct{ byteTokenizer }

func (l limitedByteTokenizer) EncodeLimit(s string, limit int) ([]int32, bool) {
	ids := l.Encode(s)
	if len(ids) > limit {
		return ids[:limit], false
	}
	return ids, true
}

// A text over twice the limit (not tokenized to its end) is refused naming the
// request's own field and item, with the limit and a lower bound of its tokens,
// as one between the limit and twice it is; and a text over the warm limit of a
// server without ephemeral workers carries its count and that limit too.
func TestPrepareOverLimitFields(t *testing.T) {
	r := &Router{Config: Config{Dim: 4, MaxInputTokens: 100}, Tokenizer: limitedByteTokenizer{}, Warm: &logitBackend{}, Long: nil}
	for _, tc := range []struct {
		text          string
		tokens, limit int
		atLeast       bool
		msg           string
	}{
		{strings.Repeat("a", 150), 151, 100, false, "in texts[1]."},
		{strings.Repeat("a", 500), 200, 100, true, "more than 200 tokens (more than 200 in your prompt; 0 for the completion) in texts[1]."},
	} {
		_, err := r.Prepare(&Request{Texts: []string{"x", tc.text}, InputField: "texts"})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Param != "texts" || ie.Index != 1 || ie.Code != CodeContextLength || ie.Tokens != tc.tokens || ie.Limit != tc.limit ||
			ie.AtLeast != tc.atLeast || !strings.Contains(ie.Message, tc.msg) {
			t.Errorf("%d bytes: %#v\nwant texts[1], %d tokens (at least: %t) over %d, message with %q", len(tc.text), err, tc.tokens, tc.atLeast, tc.limit, tc.msg)
		}
	}
	warm := &Router{Config: Config{Dim: 4, MaxInputTokens: 1000, WarmMaxTokens: 50}, Tokenizer: byteTokenizer{}, Warm: &logitBackend{}}
	_, err := warm.Prepare(&Request{Texts: []string{strings.Repeat("a", 80)}})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Tokens != 81 || ie.Limit != 50 {
		t.Errorf("over the warm limit without ephemeral workers: %#v, want 81 tokens over 50", err)
	}
}

package routing

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Truncation keeps the wrapping and EOS whole and cuts the caller's text (or native
// ids) to the limit, EOS included; byteTokenizer makes one token per byte.
func TestTruncate(t *testing.T) {
	task := "T"
	prefix := "Instruct: T\nQuery:" // 18 bytes
	tests := []struct {
		name string
		cfg  Config
		req  Request
		want [][]int32
	}{
		{"end keeps the beginning", Config{MaxInputTokens: 10}, Request{Texts: []string{"abcdefghijklmnop"}, Truncate: TruncateEnd},
			[][]int32{withEOS("abcdefghi")}},
		{"start keeps the end", Config{MaxInputTokens: 10}, Request{Texts: []string{"abcdefghijklmnop"}, Truncate: TruncateStart},
			[][]int32{withEOS("hijklmnop")}},
		{"short inputs are untouched", Config{MaxInputTokens: 10}, Request{Texts: []string{"abcdefghi", "ab"}, Truncate: TruncateEnd},
			[][]int32{withEOS("abcdefghi"), withEOS("ab")}},
		{"query prefix stays whole", Config{MaxInputTokens: 25}, Request{Texts: []string{"abcdefghijklmnop"}, InputType: "query", Instruction: &task, Truncate: TruncateEnd},
			[][]int32{withEOS(prefix + "abcdef")}},
		{"query, start", Config{MaxInputTokens: 25}, Request{Texts: []string{"abcdefghijklmnop"}, InputType: "query", Instruction: &task, Truncate: TruncateStart},
			[][]int32{withEOS(prefix + "klmnop")}},
		{"cut between characters", Config{MaxInputTokens: 6}, Request{Texts: []string{"ééééé"}, Truncate: TruncateEnd},
			[][]int32{withEOS("éé")}},
		{"cut between characters, start", Config{MaxInputTokens: 6}, Request{Texts: []string{"aééééé"}, Truncate: TruncateStart},
			[][]int32{withEOS("éé")}},
		{"the warm limit when there is no long backend", Config{MaxInputTokens: 100, WarmMaxTokens: 5}, Request{Texts: []string{"abcdefgh"}, Truncate: TruncateEnd},
			[][]int32{withEOS("abcd")}},
		{"native ids", Config{MaxInputTokens: 4, TokenIDs: TokenIDsNative}, Request{TokenIDs: [][]int64{{1, 2, 3, 4, 5, 6}}, Truncate: TruncateEnd},
			[][]int32{{1, 2, 3, EOS}}},
		{"native ids, start", Config{MaxInputTokens: 4, TokenIDs: TokenIDsNative}, Request{TokenIDs: [][]int64{{1, 2, 3, 4, 5, 6}}, Truncate: TruncateStart},
			[][]int32{{4, 5, 6, EOS}}},
		{"native ids keep the query prefix", Config{MaxInputTokens: 21, TokenIDs: TokenIDsNative}, Request{TokenIDs: [][]int64{{1, 2, 3, 4, 5}}, InputType: "query", Instruction: &task, Truncate: TruncateStart},
			[][]int32{append(byteTokenizer{}.Encode(prefix), 4, 5, EOS)}},
		{"cl100k ids are cut as their text", Config{MaxInputTokens: 8}, Request{TokenIDs: [][]int64{{15339, 1917}}, Truncate: TruncateStart},
			[][]int32{withEOS("o world")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _, _ := newRouter(tt.cfg)
			if tt.cfg.WarmMaxTokens > 0 {
				r.Long = nil
			}
			got, err := r.Prepare(&tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Fatalf("got %v\nwant %v", got, tt.want)
			}
			// Without truncation the same request is refused when anything was cut.
			tt.req.Truncate = NoTruncation
			_, err = r.Prepare(&tt.req)
			var ie *InputError
			cut := tt.name != "short inputs are untouched"
			if cut != (errors.As(err, &ie) && ie.Code == CodeContextLength) {
				t.Errorf("without truncate: error %v", err)
			}
		})
	}
}

func TestTruncateRefusesWhenNothingFits(t *testing.T) {
	task := strings.Repeat("x", 30)
	for _, req := range []Request{
		{Texts: []string{"abc"}, InputType: "query", Instruction: &task, Truncate: TruncateEnd},
		{TokenIDs: [][]int64{{1, 2}}, InputType: "query", Instruction: &task, Truncate: TruncateStart},
	} {
		r, _, _ := newRouter(Config{MaxInputTokens: 20, TokenIDs: TokenIDsNative})
		_, err := r.Prepare(&req)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Code != CodeContextLength || ie.Param != "input" || !strings.Contains(ie.Message, "the wrapping alone (the prompt and <|endoftext|>) takes 48") {
			t.Errorf("%+v: error %v", req, err)
		}
	}
}

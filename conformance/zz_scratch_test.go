package conformance

import (
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/embed-stack/embed-stack/conformance/zz_refexp"
)

func TestScratch(t *testing.T) {
	s := serverWith(t, isolatedFlags...)
	c := s.client(nil)
	m, err := refexp.Load(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2000, 8100} {
		text := repeatedText(t, n)
		resp := embed(t, c, openai.EmbeddingRequestStrings{Input: []string{text}, Model: "m"})
		got := f64(resp.Data[0].Embedding)
		want := expectDocument(t, text)
		refexp.RoundKV = true
		h, err := m.LastToken(want.tokens)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("aaa n=%d cos64=%.7f cosKV16=%.7f ref64vsKV16=%.7f", n, cosine(got, want.vec), cosine(got, h), cosine(want.vec, h))
	}
}

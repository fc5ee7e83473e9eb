package family

import (
	"fmt"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/gguf"
)

// TestCrossEncoderHead holds the cross-encoder head rule to what llama.cpp as
// pinned loads and scores for each architecture (llama-model.cpp's load_tensors,
// build_pooling's rank case): the layouts it accepts with their formulas, and every
// refusal's exact sentence.
func TestCrossEncoderHead(t *testing.T) {
	const h = 768
	shape := func(arch string, classifier, dense []uint64) gguf.Shape {
		return gguf.Shape{Architecture: arch, EmbeddingLength: h, HasClassifier: classifier != nil, ClassifierDims: classifier, DenseDims: dense}
	}
	one, square := []uint64{h, 1}, []uint64{h, h}
	for _, tt := range []struct {
		name    string
		s       gguf.Shape
		want    Head
		formula string
		rank    bool // HasRankHead
		wantErr string
	}{
		{name: "bert: pooler and classifier (BertForSequenceClassification)", s: shape("bert", one, square), rank: true,
			want: Head{Dense: true, DenseRows: h, Out: true}, formula: "cls.output.weight · tanh(cls.weight · h + cls.bias) + cls.output.bias"},
		{name: "bert: classifier alone (a conversion that drops the pooler)", s: shape("bert", one, nil), rank: true,
			want: Head{Out: true}, formula: "cls.output.weight · h + cls.output.bias"},
		{name: "bert: a one-dimensional classifier", s: shape("bert", []uint64{h}, nil), rank: true, want: Head{Out: true}, formula: "cls.output.weight · h + cls.output.bias"},
		{name: "neo-bert: dense and classifier (NeoBERTForSequenceClassification)", s: shape("neo-bert", one, square), rank: true,
			want: Head{Dense: true, DenseRows: h, Out: true}, formula: "cls.output.weight · tanh(cls.weight · h + cls.bias) + cls.output.bias"},
		{name: "jina-bert-v2: one-row classifier (jina-reranker-v1)", s: shape("jina-bert-v2", nil, one), rank: true,
			want: Head{Dense: true, DenseRows: 1}, formula: "tanh(cls.weight · h + cls.bias)"},

		{name: "bert: no classifier", s: shape("bert", nil, square),
			wantErr: "it has no classifier head (cls.output.weight), so there is nothing to score a pair with"},
		{name: "bert: three labels (an NLI model)", s: shape("bert", []uint64{h, 3}, square), rank: true,
			wantErr: "its cls.output.weight has dims [768 3], 3 outputs; a cross-encoder reranker has one (a relevance logit), and a head of several labels (an NLI or classification model) is not a reranker"},
		{name: "bert: classifier rows of another width", s: shape("bert", []uint64{384, 1}, nil), rank: true,
			wantErr: "its cls.output.weight has dims [384 1]; llama.cpp's bert loads rows of 768 values there"},
		{name: "bert: a one-row dense layer", s: shape("bert", one, one), rank: true,
			wantErr: "its cls.weight has dims [768 1]; llama.cpp's bert loads a dense layer of [768 768] there"},
		{name: "neo-bert: dense layer only", s: shape("neo-bert", nil, square),
			wantErr: "it has no classifier head (cls.output.weight), so there is nothing to score a pair with"},
		{name: "jina-bert-v2: no classifier", s: shape("jina-bert-v2", nil, nil),
			wantErr: "it has no classifier head (cls.weight, one row), so there is nothing to score a pair with"},
		{name: "jina-bert-v2: a pooler and cls.output.weight", s: shape("jina-bert-v2", one, square), rank: true,
			wantErr: "it has cls.output.weight, which llama.cpp's jina-bert-v2 does not load (its classifier is a one-row cls.weight)"},
		{name: "jina-bert-v2: two labels", s: shape("jina-bert-v2", nil, []uint64{h, 2}), rank: true,
			wantErr: "its cls.weight has dims [768 2], 2 outputs; a cross-encoder reranker has one (a relevance logit), and llama.cpp's jina-bert-v2 loads one row there"},
		{name: "jina-bert-v2: a row of another width", s: shape("jina-bert-v2", nil, []uint64{384, 1}), rank: true,
			wantErr: "its cls.weight has dims [384 1]; llama.cpp's jina-bert-v2 loads one row of 768 values there"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := Lookup(tt.s.Architecture)
			if got := a.HasRankHead(tt.s); got != tt.rank {
				t.Errorf("HasRankHead = %t, want %t", got, tt.rank)
			}
			got, err := a.CrossEncoderHead(tt.s)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v\nwant %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || got.String() != tt.formula {
				t.Errorf("CrossEncoderHead = %+v (%s), %v; want %+v (%s)", got, got, err, tt.want, tt.formula)
			}
		})
	}
	// Every other architecture: llama.cpp loads no head, so rank pooling would
	// give the [CLS] state, not a score.
	const none = "llama.cpp loads no classifier head for %s, so its rank pooling cannot score a pair; embed-stack reranks with Qwen3-Reranker models and the cross-encoders of bert (bge-reranker, ms-marco MiniLM), neo-bert and jina-bert-v2 (jina-reranker-v1)"
	var served []string
	for _, a := range Archs {
		if a.RankHead != RankHeadNone {
			served = append(served, a.Name)
			continue
		}
		if _, err := a.CrossEncoderHead(shape(a.Name, one, square)); err == nil || err.Error() != fmt.Sprintf(none, a.Name) {
			t.Errorf("%s: err = %v, want %s", a.Name, err, fmt.Sprintf(none, a.Name))
		}
	}
	if got := strings.Join(served, " "); got != "bert neo-bert jina-bert-v2" {
		t.Errorf("architectures with a rank head: %s; want bert neo-bert jina-bert-v2, those llama.cpp loads cls or cls_out for", got)
	}
}

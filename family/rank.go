package family

import (
	"fmt"
	"strings"

	"github.com/embed-stack/embed-stack/gguf"
)

// RankHead is the classification head llama.cpp's loader reads for an encoder
// architecture's cross-encoders (llama-model.cpp, load_tensors), which its rank
// pooling applies to the state of each sequence's first token
// (llm_graph_context::build_pooling, LLAMA_POOLING_TYPE_RANK; only qwen3 is read at
// its last token):
//
//	x = h[first token]
//	x = tanh(cls.weight · x + cls.bias)           when the GGUF has cls.weight
//	x = cls.output.weight · x + cls.output.bias   when it has cls.output.weight
//
// and the pair's score is x, which for a reranker must be one number. llama.cpp
// applies no sigmoid, and applies the tanh whenever cls.weight is there, also when
// no cls.output.weight follows it.
type RankHead int

const (
	// RankHeadNone: llama.cpp loads no classifier head for the architecture. Its
	// rank pooling then gives the [CLS] state itself, not a score, and a GGUF
	// carrying a head does not load ("wrong number of tensors").
	RankHeadNone RankHead = iota
	// RankHeadPooled: an optional dense layer, cls.weight of hidden × hidden with
	// cls.bias (BERT's pooler, RoBERTa's classifier.dense, NeoBERT's dense), then
	// the classifier cls.output.weight with cls.output.bias, of one output for a
	// reranker. bert (BertForSequenceClassification, and XLMRobertaForSequence-
	// Classification, which llama.cpp converts as bert) and neo-bert.
	RankHeadPooled
	// RankHeadOneRow: the classifier is cls.weight itself, one row, with cls.bias
	// (Hugging Face's classifier, a Linear to one label, which llama.cpp's
	// conversion maps to LLM_TENSOR_CLS), and there is no cls.output.weight: the
	// score is tanh(cls.weight · h + cls.bias), in (-1, 1). jina-bert-v2
	// (jina-reranker-v1-tiny-en and -turbo-en).
	RankHeadOneRow
)

// Head is the layout of one cross-encoder's classifier head, as CrossEncoderHead
// finds it in the GGUF: x = h, then tanh(cls.weight · x + cls.bias) when Dense,
// then cls.output.weight · x + cls.output.bias when Out.
type Head struct {
	// Dense says the head starts with cls.weight (and cls.bias when the GGUF has
	// it) and a tanh; DenseRows is its number of rows (the hidden size, or 1 where
	// it is the classifier itself).
	Dense     bool
	DenseRows int
	// Out says the head ends in cls.output.weight, one row, and cls.output.bias
	// when the GGUF has it.
	Out bool
}

// String writes the head's formula, for /info and logs.
func (h Head) String() string {
	switch {
	case h.Dense && h.Out:
		return "cls.output.weight · tanh(cls.weight · h + cls.bias) + cls.output.bias"
	case h.Dense:
		return "tanh(cls.weight · h + cls.bias)"
	}
	return "cls.output.weight · h + cls.output.bias"
}

// HasRankHead says the GGUF of shape s, of architecture a, holds the tensor a
// cross-encoder's score ends in: cls.output.weight (a Qwen3-Reranker's too), or for
// an architecture whose classifier is a one-row cls.weight (RankHeadOneRow) that
// tensor. serve's --task auto takes such a GGUF for a reranker.
func (a Arch) HasRankHead(s gguf.Shape) bool {
	return s.HasClassifier || a.RankHead == RankHeadOneRow && s.DenseDims != nil
}

// CrossEncoderHead checks that a GGUF of shape s, served as a cross-encoder of
// architecture a, holds a head that llama.cpp loads for a and whose rank pooling
// gives one number, and returns its layout. It refuses what llama.cpp cannot score
// (an architecture without a head, a missing classifier, tensors llama.cpp would
// refuse to load) and a head of several outputs (an NLI or classification model),
// which is not a relevance score. Its errors are sentences for serve's refusal;
// modelinfo and the engine say which model.
func (a Arch) CrossEncoderHead(s gguf.Shape) (Head, error) {
	hidden := uint64(s.EmbeddingLength)
	switch a.RankHead {
	case RankHeadPooled:
		if !s.HasClassifier {
			return Head{}, fmt.Errorf("it has no classifier head (%s), so there is nothing to score a pair with", gguf.TensorClassifier)
		}
		if d := s.ClassifierDims; len(d) > 2 || len(d) == 2 && d[1] != 1 {
			return Head{}, fmt.Errorf("its %s has dims %v, %d outputs; a cross-encoder reranker has one (a relevance logit), and a head of several labels (an NLI or classification model) is not a reranker", gguf.TensorClassifier, d, d[len(d)-1])
		}
		if d := s.ClassifierDims; d[0] != hidden {
			return Head{}, fmt.Errorf("its %s has dims %v; llama.cpp's %s loads rows of %d values there", gguf.TensorClassifier, d, a.Name, hidden)
		}
		h := Head{Out: true}
		if d := s.DenseDims; d != nil {
			if len(d) != 2 || d[0] != hidden || d[1] != hidden {
				return Head{}, fmt.Errorf("its %s has dims %v; llama.cpp's %s loads a dense layer of [%d %d] there", gguf.TensorClassifierDense, d, a.Name, hidden, hidden)
			}
			h.Dense, h.DenseRows = true, int(hidden)
		}
		return h, nil
	case RankHeadOneRow:
		if s.HasClassifier {
			return Head{}, fmt.Errorf("it has %s, which llama.cpp's %s does not load (its classifier is a one-row %s)", gguf.TensorClassifier, a.Name, gguf.TensorClassifierDense)
		}
		d := s.DenseDims
		if d == nil {
			return Head{}, fmt.Errorf("it has no classifier head (%s, one row), so there is nothing to score a pair with", gguf.TensorClassifierDense)
		}
		if len(d) > 2 || len(d) == 2 && d[1] != 1 {
			return Head{}, fmt.Errorf("its %s has dims %v, %d outputs; a cross-encoder reranker has one (a relevance logit), and llama.cpp's %s loads one row there", gguf.TensorClassifierDense, d, d[len(d)-1], a.Name)
		}
		if d[0] != hidden {
			return Head{}, fmt.Errorf("its %s has dims %v; llama.cpp's %s loads one row of %d values there", gguf.TensorClassifierDense, d, a.Name, hidden)
		}
		return Head{Dense: true, DenseRows: 1}, nil
	}
	return Head{}, fmt.Errorf("llama.cpp loads no classifier head for %s, so its rank pooling cannot score a pair; embed-stack reranks with Qwen3-Reranker models and the cross-encoders of %s", a.Name, CrossEncoderNames())
}

// CrossEncoderNames lists the architectures whose cross-encoders embed-stack
// serves (a RankHead), with a few of their models, for messages.
func CrossEncoderNames() string {
	var served []Arch
	for _, a := range Archs {
		if a.RankHead != RankHeadNone {
			served = append(served, a)
		}
	}
	var b strings.Builder
	for i, a := range served {
		switch {
		case i == 0:
		case i == len(served)-1:
			b.WriteString(" and ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(a.Name)
		if a.Rerankers != "" {
			b.WriteString(" (" + a.Rerankers + ")")
		}
	}
	return b.String()
}

package llama

/*
#include "es.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/embed-stack/embed-stack/family"
	"github.com/embed-stack/embed-stack/gguf"
)

// scoreHead turns the hidden state of the token a reranker reads into its two
// outputs: a Qwen3-Reranker's [logit(yes), logit(no)] (yesNoHead), a
// cross-encoder's [logit, 0] (classifierHead). Either way the router's score is
// sigmoid(out[0] - out[1]).
type scoreHead interface {
	apply(out, h []float32)
}

// yesNoHead is the part of a Qwen3-Reranker's LM head the score needs: the rows of
// the tokens "yes" and "no", dequantised once at Open. The reranker's score is
// P(yes) = softmax over the logits of "yes" and "no" at the last position, and those
// two logits are these rows times the final hidden state; the other 151667 rows of
// the head are never computed.
type yesNoHead struct {
	yes, no []float32
	// source says where the rows came from, for logs and errors.
	source string
}

// apply writes [logit(yes), logit(no)] for the final hidden state h into out. The
// sums run in float64, in a fixed order, so the two logits are a function of h alone.
func (hd *yesNoHead) apply(out, h []float32) {
	var y, n float64
	for k, x := range h {
		y += float64(hd.yes[k]) * float64(x)
		n += float64(hd.no[k]) * float64(x)
	}
	out[0], out[1] = float32(y), float32(n)
}

// readYesNoHead finds the "yes" and "no" rows of the GGUF at path, each of hidden
// values, in the layouts a Qwen3-Reranker GGUF comes in:
//
//   - cls.output.weight, as llama.cpp's conversion (convert_hf_to_gguf.py) writes
//     it: the LM head's "yes" and "no" rows stacked into a classifier head, with
//     {arch}.classifier.output_labels ["yes", "no"] naming them (rows 0 and 1 when
//     a two-row head has no labels). The full head is then dropped or, for the 0.6B
//     model whose head is tied, left as token_embd.weight.
//   - otherwise the full LM head, output.weight or (tied) token_embd.weight, at the
//     ids of the tokens "yes" and "no" in tokenizer.ggml.tokens.
func readYesNoHead(path string, hidden int) (*yesNoHead, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama: reading the reranker head of %s: %w", path, err)
	}
	defer f.Close()
	shape, err := f.Shape()
	if err != nil {
		return nil, fmt.Errorf("llama: model %s: %w", path, err)
	}
	name, yesRow, noRow := "", -1, -1
	if t, ok := f.Tensor(gguf.TensorClassifier); ok {
		name = t.Name
		labels := shape.ClassifierLabels
		switch {
		case shape.Has(gguf.KeyClassifierLabels):
			yesRow, noRow = slices.Index(labels, "yes"), slices.Index(labels, "no")
			if yesRow < 0 || noRow < 0 {
				return nil, fmt.Errorf(`llama: model %s: cls.output.weight is labelled %q; a Qwen3-Reranker head is labelled "yes" and "no"`, path, labels)
			}
		case len(t.Dims) == 2 && t.Dims[1] == 2:
			yesRow, noRow = 0, 1 // llama.cpp's conversion stacks [yes, no]
		default:
			return nil, fmt.Errorf("llama: model %s: cls.output.weight has dims %v and no classifier labels; cannot tell which rows are \"yes\" and \"no\"", path, t.Dims)
		}
	} else {
		tokens, err := f.Strings(gguf.KeyTokens)
		if err != nil {
			return nil, fmt.Errorf("llama: model %s has no cls.output.weight, and its vocabulary cannot be read to find the \"yes\" and \"no\" rows of the LM head: %w", path, err)
		}
		yesRow, noRow = slices.Index(tokens, "yes"), slices.Index(tokens, "no")
		if yesRow < 0 || noRow < 0 {
			return nil, fmt.Errorf(`llama: model %s: its vocabulary has no "yes" or no "no" token; it is not a Qwen3-Reranker`, path)
		}
		name = "output.weight"
		if _, ok := f.Tensor(name); !ok {
			name = gguf.TensorTokenEmbedding // tied, as in Qwen3-0.6B
		}
	}
	t, _ := f.Tensor(name)
	yes, err := readRow(f, t, yesRow, hidden)
	if err != nil {
		return nil, fmt.Errorf("llama: model %s: %w", path, err)
	}
	no, err := readRow(f, t, noRow, hidden)
	if err != nil {
		return nil, fmt.Errorf("llama: model %s: %w", path, err)
	}
	return &yesNoHead{yes: yes, no: no, source: fmt.Sprintf("%s rows %d (yes) and %d (no)", name, yesRow, noRow)}, nil
}

// readRow returns row r of the 2-D tensor t as float32, dequantised by ggml; a
// 1-D tensor (a bias) is one row.
func readRow(f *gguf.File, t gguf.TensorInfo, r, hidden int) ([]float32, error) {
	if len(t.Dims) == 1 {
		t.Dims = append(t.Dims, 1)
	}
	if len(t.Dims) != 2 || t.Dims[0] != uint64(hidden) || uint64(r) >= t.Dims[1] {
		return nil, fmt.Errorf("tensor %s has dims %v; want %d values a row and a row %d", t.Name, t.Dims, hidden, r)
	}
	if !t.Type.Known() || t.Dims[0]%t.Type.BlockSize() != 0 {
		return nil, fmt.Errorf("tensor %s has type %s, which this build cannot read", t.Name, t.Type)
	}
	rowBytes := t.Dims[0] / t.Type.BlockSize() * t.Type.TypeSize()
	raw := make([]byte, rowBytes)
	if _, err := f.TensorReader(t).ReadAt(raw, int64(uint64(r)*rowBytes)); err != nil {
		return nil, fmt.Errorf("reading row %d of %s: %w", r, t.Name, err)
	}
	out := make([]float32, hidden)
	if t.Type == gguf.TypeF32 {
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	} else if !C.es_to_float(C.enum_ggml_type(t.Type), unsafe.Pointer(&raw[0]), (*C.float)(unsafe.Pointer(&out[0])), C.int64_t(hidden)) {
		return nil, fmt.Errorf("tensor %s has type %s, which ggml cannot convert to float", t.Name, t.Type)
	}
	for i, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("row %d of %s holds %v at %d", r, t.Name, v, i)
		}
	}
	return out, nil
}

// classifierHead is a cross-encoder's classification head, computed as llama.cpp's
// rank pooling applies it to the [CLS] state (llm_graph_context::build_pooling),
// in the layout family.Arch.CrossEncoderHead finds for the model's architecture:
// x = h; x = tanh(dense·x + denseBias) when the GGUF has cls.weight (BERT's
// pooler, RoBERTa's classifier.dense, NeoBERT's dense: hidden rows; jina-bert-v2's
// classifier: one row); then out·x + outBias when it has cls.output.weight. The
// score is x's one value. llama.cpp applies the tanh whenever cls.weight is there,
// so a jina-bert-v2 score is tanh of its classifier's output, and no sigmoid; the
// router applies one, as sentence-transformers' CrossEncoder does for a one-label
// model.
type classifierHead struct {
	dense             [][]float32 // nil without cls.weight
	denseBias         []float32   // nil without cls.bias
	out               []float32   // nil without cls.output.weight
	outBias           float64
	source            string
	scratch, scratch2 []float64
}

// apply writes [score, 0] for the [CLS] state h into out, summing in float64.
func (hd *classifierHead) apply(out, h []float32) {
	x := hd.scratch[:0]
	for _, v := range h {
		x = append(x, float64(v))
	}
	if hd.dense != nil {
		y := hd.scratch2[:0]
		for i, row := range hd.dense {
			var s float64
			for k, w := range row {
				s += float64(w) * x[k]
			}
			if hd.denseBias != nil {
				s += float64(hd.denseBias[i])
			}
			y = append(y, math.Tanh(s))
		}
		x = y
	}
	if hd.out == nil {
		out[0], out[1] = float32(x[0]), 0
		return
	}
	s := hd.outBias
	for k, w := range hd.out {
		s += float64(w) * x[k]
	}
	out[0], out[1] = float32(s), 0
}

// Tensor names of a cross-encoder's head (llama.cpp's LLM_TENSOR_CLS and
// LLM_TENSOR_CLS_OUT biases).
const (
	tensorCLSDenseBias = "cls.bias"
	tensorCLSOutBias   = "cls.output.bias"
)

// readClassifierHead reads the classification head of the cross-encoder GGUF at
// path, of the given shape (hidden values a row), in the layout llama.cpp loads for
// its architecture (family.Arch.CrossEncoderHead, which also refuses a head of
// several outputs, an NLI model's, and what llama.cpp does not score).
func readClassifierHead(path string, shape gguf.Shape, hidden int) (*classifierHead, error) {
	arch, _ := family.Lookup(shape.Architecture)
	layout, err := arch.CrossEncoderHead(shape)
	if err != nil {
		return nil, fmt.Errorf("llama: model %s: %w", path, err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama: reading the classifier head of %s: %w", path, err)
	}
	defer f.Close()
	hd := &classifierHead{source: layout.String(), scratch: make([]float64, 0, hidden), scratch2: make([]float64, 0, max(hidden, layout.DenseRows))}
	if layout.Dense {
		d, _ := f.Tensor(gguf.TensorClassifierDense)
		hd.dense = make([][]float32, layout.DenseRows)
		for r := range hd.dense {
			if hd.dense[r], err = readRow(f, d, r, hidden); err != nil {
				return nil, fmt.Errorf("llama: model %s: %w", path, err)
			}
		}
		if b, ok := f.Tensor(tensorCLSDenseBias); ok {
			if hd.denseBias, err = readRow(f, b, 0, layout.DenseRows); err != nil {
				return nil, fmt.Errorf("llama: model %s: %w", path, err)
			}
		}
	}
	if layout.Out {
		t, _ := f.Tensor(gguf.TensorClassifier)
		if hd.out, err = readRow(f, t, 0, hidden); err != nil {
			return nil, fmt.Errorf("llama: model %s: %w", path, err)
		}
		if b, ok := f.Tensor(tensorCLSOutBias); ok {
			v, err := readRow(f, b, 0, 1)
			if err != nil {
				return nil, fmt.Errorf("llama: model %s: %w", path, err)
			}
			hd.outBias = float64(v[0])
		}
	}
	return hd, nil
}

package llama

/*
#include "es.h"
*/
import "C"

import (
	"fmt"
	"slices"

	"github.com/embed-stack/embed-stack/gguf"
)

// tensorTokenTypes is BERT's token-type (segment) embedding table, one row per
// type (llama.cpp's LLM_TENSOR_TOKEN_TYPES).
const tensorTokenTypes = "token_types.weight"

// tokenInput feeds a cross-encoder's tokens to llama.cpp as input embeddings
// instead of ids, so that the document's tokens carry token type 1.
//
// Why: a BERT cross-encoder (ms-marco MiniLM) was trained on `[CLS] query [SEP]
// document [SEP]` with token type 0 for the query's segment and 1 for the
// document's, but llama.cpp's bert graph adds token type 0's row to every token
// ("token types are hardcoded to zero", src/models/bert.cpp), so llama-server
// scores such a model with the document typed as the query (its jina-bert-v2 graph,
// jina-reranker-v1's, does the same). The graph takes input
// embeddings in place of ids (build_inp_embd) and adds type 0's row and the
// positions to them all the same; a row here is therefore the token's embedding
// plus (type 1's row − type 0's row) for the tokens after the first [SEP], and the
// token's embedding alone before it. A model whose table has one type (XLM-R:
// bge-reranker), or two equal rows, needs none of this and is fed ids.
//
// It holds the token-embedding table as float32 (vocabulary × hidden: 47 MB for
// MiniLM's 30522 × 384), dequantised once at Open with ggml's row conversion, so
// a row is exactly what llama.cpp's get_rows would give.
type tokenInput struct {
	hidden int
	table  []float32 // row id at [id*hidden, (id+1)*hidden)
	delta  []float32 // type 1's row − type 0's
	sep    int32     // the separator id; the tokens after its first occurrence are type 1
	rows   []float32 // scratch for one span's rows
}

// readTokenInput returns the tokenInput of the cross-encoder GGUF at path, or nil
// when its token types make no difference. The separator is the vocabulary's
// tokenizer.ggml.seperator_token_id (sic), 102 for a WordPiece vocabulary that
// names none (llama.cpp's default; the engine loads no vocabulary to ask it).
func readTokenInput(path string, hidden int) (*tokenInput, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama: reading the token types of %s: %w", path, err)
	}
	defer f.Close()
	tt, ok := f.Tensor(tensorTokenTypes)
	if !ok || len(tt.Dims) != 2 || tt.Dims[1] < 2 {
		return nil, nil
	}
	t0, err := readRow(f, tt, 0, hidden)
	if err != nil {
		return nil, fmt.Errorf("llama: model %s: %w", path, err)
	}
	t1, err := readRow(f, tt, 1, hidden)
	if err != nil {
		return nil, fmt.Errorf("llama: model %s: %w", path, err)
	}
	if slices.Equal(t0, t1) {
		return nil, nil
	}
	sep := int32(-1)
	if id, err := f.Uint32("tokenizer.ggml.seperator_token_id"); err == nil {
		sep = int32(id)
	} else if m, _ := f.String("tokenizer.ggml.model"); m == "bert" {
		sep = 102
	}
	if sep < 0 {
		return nil, fmt.Errorf("llama: model %s has two token types but its vocabulary names no separator token (tokenizer.ggml.seperator_token_id), so the document's segment cannot be told", path)
	}
	in := &tokenInput{hidden: hidden, delta: make([]float32, hidden), sep: sep}
	for k := range in.delta {
		in.delta[k] = t1[k] - t0[k]
	}
	te, ok := f.Tensor(gguf.TensorTokenEmbedding)
	if !ok || len(te.Dims) != 2 {
		return nil, fmt.Errorf("llama: model %s has no 2-D %s", path, gguf.TensorTokenEmbedding)
	}
	vocab := int(te.Dims[1])
	in.table = make([]float32, 0, vocab*hidden)
	for r := range vocab {
		row, err := readRow(f, te, r, hidden)
		if err != nil {
			return nil, fmt.Errorf("llama: model %s: %w", path, err)
		}
		in.table = append(in.table, row...)
	}
	return in, nil
}

// add appends the tokens seq[from:to] of one sequence to the batch b (made with
// llama_batch_init's embd of hidden) as es_batch_add does with ids.
func (in *tokenInput) add(b *C.struct_llama_batch, seq []int32, from, to int, slot C.llama_seq_id, outputs C.int) C.int32_t {
	second := slices.Index(seq, in.sep) + 1 // the first token of type 1; 0 when there is no separator
	n := to - from
	rows := slices.Grow(in.rows[:0], n*in.hidden)[:n*in.hidden]
	for i, id := range seq[from:to] {
		row := rows[i*in.hidden : (i+1)*in.hidden]
		copy(row, in.table[int(id)*in.hidden:])
		if second > 0 && from+i >= second {
			for k, d := range in.delta {
				row[k] += d
			}
		}
	}
	in.rows = rows
	return C.es_batch_add_embd(b, (*C.float)(&rows[0]), C.int32_t(n), C.int32_t(in.hidden), slot, C.llama_pos(from), outputs)
}

package llama

/*
#include <stdbool.h>
#include <stdlib.h>
#include "llama.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// These are the second references of the tests of encoder models (BERT, XLM-R; issue
// 25) before the engine serves them: llama.cpp's own tokenizer, loaded vocabulary-only,
// and llama.cpp's own pooling (the model's pooling_type, e.g. MEAN) through a plain
// context. The API server never calls them: it tokenizes in package tokenizer.

// llamaTokenize tokenizes each text with the vocabulary of the GGUF at path, as
// llama_tokenize does without special tokens and with control-token text left as text
// (parse_special false).
func llamaTokenize(path string, texts []string) ([][]int32, error) {
	if err := backendInit(); err != nil {
		return nil, err
	}
	mp := C.llama_model_default_params()
	mp.vocab_only = true
	mp.n_gpu_layers = 0
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	takeLastError()
	model := C.llama_model_load_from_file(cpath, mp)
	if model == nil {
		return nil, fmt.Errorf("llama: loading the vocabulary of %s failed: %s", path, llamaReason("is it a GGUF file?"))
	}
	defer C.llama_model_free(model)
	vocab := C.llama_model_get_vocab(model)
	out := make([][]int32, len(texts))
	for i, text := range texts {
		ids := make([]int32, len(text)+8)
		var ctext *C.char
		if len(text) > 0 {
			ctext = (*C.char)(unsafe.Pointer(unsafe.StringData(text)))
		}
		n := C.llama_tokenize(vocab, ctext, C.int32_t(len(text)), (*C.llama_token)(unsafe.Pointer(unsafe.SliceData(ids))), C.int32_t(len(ids)), false, false)
		if n < 0 {
			return nil, fmt.Errorf("llama: text %d needs %d tokens, more than its %d bytes + 8", i, -n, len(text))
		}
		out[i] = ids[:n]
	}
	return out, nil
}

// llamaPooled embeds each sequence alone with llama.cpp's pooling of the model's
// pooling_type, on the CPU, in a context sized to the longest sequence.
func llamaPooled(path string, seqs [][]int32, threads int) ([][]float32, error) {
	if err := backendInit(); err != nil {
		return nil, err
	}
	mp := C.llama_model_default_params()
	mp.n_gpu_layers = 0
	mp.split_mode = C.LLAMA_SPLIT_MODE_NONE
	mp.main_gpu = -1
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	takeLastError()
	model := C.llama_model_load_from_file(cpath, mp)
	if model == nil {
		return nil, fmt.Errorf("llama: loading %s failed: %s", path, llamaReason("is it a GGUF file of a supported architecture?"))
	}
	defer C.llama_model_free(model)
	longest := 1
	for _, s := range seqs {
		longest = max(longest, len(s))
	}
	cp := C.llama_context_default_params()
	cp.n_ctx = C.uint32_t(longest)
	cp.n_batch = C.uint32_t(longest)
	cp.n_ubatch = C.uint32_t(longest)
	cp.n_seq_max = 1
	cp.n_threads = C.int32_t(threads)
	cp.n_threads_batch = C.int32_t(threads)
	cp.pooling_type = C.LLAMA_POOLING_TYPE_UNSPECIFIED // the model's own
	cp.embeddings = true
	cp.no_perf = true
	lctx := C.llama_init_from_model(model, cp)
	if lctx == nil {
		return nil, fmt.Errorf("llama: creating a context for %s failed: %s", path, llamaReason("see the debug log"))
	}
	defer freeContext(lctx)
	width := int(C.llama_model_n_embd(model))
	batch := C.llama_batch_init(C.int32_t(longest), 0, 1)
	defer C.llama_batch_free(batch)
	out := make([][]float32, len(seqs))
	for i, seq := range seqs {
		if len(seq) == 0 {
			return nil, fmt.Errorf("llama: sequence %d is empty", i)
		}
		C.llama_memory_clear(C.llama_get_memory(lctx), true)
		// One sequence, every token an output (MEAN and CLS pooling read them all).
		n := len(seq)
		tokens, pos := unsafe.Slice(batch.token, n), unsafe.Slice(batch.pos, n)
		nSeq, seqID, logits := unsafe.Slice(batch.n_seq_id, n), unsafe.Slice(batch.seq_id, n), unsafe.Slice(batch.logits, n)
		for j, id := range seq {
			tokens[j], pos[j], nSeq[j], logits[j] = C.llama_token(id), C.llama_pos(j), 1, 1
			*seqID[j] = 0
		}
		batch.n_tokens = C.int32_t(n)
		if rc := C.llama_decode(lctx, batch); rc != 0 {
			return nil, fmt.Errorf("llama: decoding sequence %d returned %d: %s", i, int(rc), llamaReason("see the debug log"))
		}
		p := C.llama_get_embeddings_seq(lctx, 0)
		if p == nil {
			return nil, fmt.Errorf("llama: no pooled embedding for sequence %d (is the model's pooling_type set?)", i)
		}
		out[i] = append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(p)), width)...)
	}
	return out, nil
}

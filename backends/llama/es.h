// es.h: the C helpers of package llama (embed-stack's llama.cpp engine).
//
// cgo compiles each Go file's preamble as its own C translation unit, so helpers
// defined in one file's preamble cannot be called from another. They live here
// instead, all static inline, and every file that calls them includes this header:
// each translation unit gets its own copy, and those that call none of them compile
// nothing. A file with an //export (log.go) must not include it: its preamble may
// hold declarations only.
#ifndef EMBED_STACK_ES_H
#define EMBED_STACK_ES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"

// Which tokens of a span es_batch_add marks as outputs.
enum { ES_OUT_NONE = 0, ES_OUT_LAST = 1, ES_OUT_FIRST = 2, ES_OUT_ALL = 3 };

// es_batch_meta sets the positions pos0.., the sequence and the output marks (none,
// the last, the first or all: ES_OUT_*) of n rows of b from index b->n_tokens on,
// counts them in, and returns the batch index of the first.
static inline int32_t es_batch_meta(struct llama_batch *b, int32_t n, llama_seq_id seq, llama_pos pos0, int outputs) {
	int32_t at = b->n_tokens;
	for (int32_t i = 0; i < n; i++) {
		b->pos[at + i] = pos0 + i;
		b->n_seq_id[at + i] = 1;
		b->seq_id[at + i][0] = seq;
		b->logits[at + i] = outputs == ES_OUT_ALL;
	}
	if (n > 0 && outputs == ES_OUT_LAST) {
		b->logits[at + n - 1] = 1;
	}
	if (n > 0 && outputs == ES_OUT_FIRST) {
		b->logits[at] = 1;
	}
	b->n_tokens = at + n;
	return at;
}

// es_batch_add appends n tokens of one sequence, at positions pos0.., to b, and marks
// as outputs none of them, the last, the first or all (ES_OUT_*). It returns the
// batch index of the first token added. One call per span keeps cgo crossings per
// decode call at the number of sequences, not the number of tokens.
static inline int32_t es_batch_add(struct llama_batch *b, const llama_token *tokens, int32_t n,
                                   llama_seq_id seq, llama_pos pos0, int outputs) {
	memcpy(b->token + b->n_tokens, tokens, sizeof(llama_token) * (size_t)n);
	return es_batch_meta(b, n, seq, pos0, outputs);
}

// es_batch_add_embd is es_batch_add for a batch of input embeddings (b->embd, of
// n_embd floats a row; llama_batch_init with embd): rows holds the n rows. A
// cross-encoder's tokens of the second segment go in this way (tokeninput.go).
static inline int32_t es_batch_add_embd(struct llama_batch *b, const float *rows, int32_t n, int32_t n_embd,
                                        llama_seq_id seq, llama_pos pos0, int outputs) {
	memmove(b->embd + (size_t)b->n_tokens * (size_t)n_embd, rows, sizeof(float) * (size_t)n * (size_t)n_embd);
	return es_batch_meta(b, n, seq, pos0, outputs);
}

// es_sum_rows adds the output rows of batch indices first..first+n-1 (width floats
// each) to acc, in that order and in double precision, so that a mean pooled over
// them is the same bit for bit whatever else the call held. It returns false when
// llama.cpp has no output for one of them.
static inline bool es_sum_rows(struct llama_context *ctx, int32_t first, int32_t n, int32_t width, double *acc) {
	for (int32_t i = 0; i < n; i++) {
		const float *row = llama_get_embeddings_ith(ctx, first + i);
		if (row == NULL) {
			return false;
		}
		for (int32_t j = 0; j < width; j++) {
			acc[j] += (double)row[j];
		}
	}
	return true;
}

// es_batch_mark_output makes token i of b an output too.
static inline void es_batch_mark_output(struct llama_batch *b, int32_t i) {
	b->logits[i] = 1;
}

// es_batch_fill_all puts one sequence into b with every token marked as an output,
// which llama.cpp's own pooling needs (crosscheck.go).
static inline void es_batch_fill_all(struct llama_batch *b, const llama_token *tokens, int32_t n) {
	for (int32_t i = 0; i < n; i++) {
		b->token[i] = tokens[i];
		b->pos[i] = i;
		b->n_seq_id[i] = 1;
		b->seq_id[i][0] = 0;
		b->logits[i] = 1;
	}
	b->n_tokens = n;
}

// es_abort is what llama.cpp's abort callback reads, between graph nodes, to stop a
// decode call early. Jobs are numbered; a caller that gives up raises cancelled to its
// job's number (never lowers it), so a late cancellation cannot abort a later job.
//
// A decode call of a long sequence is also stopped when a short job is waiting
// (preempt > 0) while that call may give way (yield != 0): see Engine.yield.
typedef struct {
	int64_t closed;    // non-zero once the engine is closing
	int64_t job;       // number of the job now running
	int64_t cancelled; // highest job number whose caller gave up
	int64_t preempt;   // short jobs waiting to be taken
	int64_t yield;     // non-zero while the decode call in flight may give way to them
} es_abort;

static inline bool es_should_abort(void *data) {
	es_abort *a = data;
	return __atomic_load_n(&a->closed, __ATOMIC_RELAXED) != 0 ||
	       __atomic_load_n(&a->cancelled, __ATOMIC_RELAXED) == __atomic_load_n(&a->job, __ATOMIC_RELAXED) ||
	       (__atomic_load_n(&a->yield, __ATOMIC_RELAXED) != 0 && __atomic_load_n(&a->preempt, __ATOMIC_RELAXED) > 0);
}

// es_abort_callback hands Go the address of es_should_abort (its copy in the
// calling translation unit; every copy reads es_abort the same way).
static inline ggml_abort_callback es_abort_callback(void) { return es_should_abort; }

// es_no_vocab fills o[0..2] with the metadata overrides that load a model without
// its tokenizer: tokenizer model "none" and n_vocab dummy tokens (o[2] ends the
// list). See loadModel.
static inline void es_no_vocab(struct llama_model_kv_override *o, const char *arch, int64_t n_vocab) {
	memset(o, 0, 3 * sizeof *o);
	o[0].tag = LLAMA_KV_OVERRIDE_TYPE_STR;
	strncpy(o[0].key, "tokenizer.ggml.model", sizeof o[0].key - 1);
	strncpy(o[0].val_str, "none", sizeof o[0].val_str - 1);
	o[1].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
	snprintf(o[1].key, sizeof o[1].key, "%s.vocab_size", arch);
	o[1].val_i64 = n_vocab;
}

// es_to_float dequantises n values of type t at src into dst with ggml's own row
// conversion, so the head rows hold exactly the values llama.cpp's LM head would
// multiply with (rerank.go). It returns false for a type without a conversion (F32
// has none: it is copied by the caller).
static inline bool es_to_float(enum ggml_type t, const void *src, float *dst, int64_t n) {
	const struct ggml_type_traits *tr = ggml_get_type_traits(t);
	if (tr == NULL || tr->to_float == NULL) {
		return false;
	}
	tr->to_float(src, dst, n);
	return true;
}

#endif // EMBED_STACK_ES_H

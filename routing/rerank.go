package routing

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// Qwen3 control tokens of the reranker's chat template. Like EOS they are written as
// ids, never tokenized from text, so that a query or document can never produce
// them; the embed-stack command checks at start that the vocabulary has them here.
const (
	ImStart  int32 = 151644 // <|im_start|>
	ImEnd    int32 = 151645 // <|im_end|>
	Think    int32 = 151667 // <think>
	ThinkEnd int32 = 151668 // </think>
)

// rerankSystem is the system prompt of Qwen3-Reranker's model card (and of the
// template llama.cpp's conversion stores in the GGUF).
const rerankSystem = `Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".`

// RerankPair returns the text between the template's fixed prefix and suffix for one
// query-document pair, as the model card's format_instruction writes it.
func RerankPair(instruction, query, document string) string {
	return "<Instruct>: " + instruction + "\n<Query>: " + query + "\n<Document>: " + document
}

// rerankTemplate holds the token ids around each pair, built once from the tokenizer.
type rerankTemplate struct {
	once           sync.Once
	prefix, suffix []int32
}

// rerankIDs returns the template's ids before and after a pair:
//
//	<|im_start|>system\n{rerankSystem}<|im_end|>\n<|im_start|>user\n  {pair}
//	<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n
//
// The model card tokenizes the prefix, the pair and the suffix separately and
// concatenates them; so does this, and the text between control tokens is tokenized
// piece by piece, as Hugging Face's tokenizer splits text around added tokens.
func (r *Router) rerankIDs() (prefix, suffix []int32) {
	t := &r.template
	t.once.Do(func() {
		enc := r.Tokenizer.Encode
		t.prefix = join([]int32{ImStart}, enc("system\n"+rerankSystem), []int32{ImEnd}, enc("\n"), []int32{ImStart}, enc("user\n"))
		t.suffix = join([]int32{ImEnd}, enc("\n"), []int32{ImStart}, enc("assistant\n"), []int32{Think}, enc("\n\n"), []int32{ThinkEnd}, enc("\n\n"))
	})
	return t.prefix, t.suffix
}

func join(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// RerankRequest is one rerank request after JSON decoding.
type RerankRequest struct {
	Query     string
	Documents []string
	// Instruction overrides the task when non-nil; the default is
	// Config.DefaultInstruction, the model card's.
	Instruction *string
	// DocumentsField names the request field that holds the documents, for error
	// messages and InputError.Param: "" is Cohere's and Jina's "documents"; TEI's
	// POST /rerank says "texts".
	DocumentsField string
	// Truncate shortens a document whose pair is over the per-pair limit, cutting
	// the document's text (TEI's "truncate"; the query is never cut), instead of
	// refusing it.
	Truncate Truncation
}

// names returns the documents' field and how messages name document i and the
// documents in a count: "document 3" and "documents", or "texts[3]" and "texts".
func (req *RerankRequest) names() (field string, item func(int) string, plural string) {
	switch f := req.DocumentsField; f {
	case "", "documents":
		return "documents", func(i int) string { return fmt.Sprintf("document %d", i) }, "documents"
	default:
		return f, func(i int) string { return fmt.Sprintf("%s[%d]", f, i) }, f
	}
}

// RerankResult holds one score per document, in input order, and the tokens
// decoded.
type RerankResult struct {
	// Scores are P(yes) = sigmoid(logit(yes) - logit(no)) at the pair's last token:
	// the softmax over the two logits the model card takes.
	Scores []float64
	// Logits are logit(yes) - logit(no), the score before the sigmoid (TEI's
	// raw_scores).
	Logits []float64
	// Tokens is the number of tokens decoded: every pair in its template.
	Tokens int
}

// Ranked returns document indices by descending score (ties in input order), at
// most topN of them when topN > 0.
func (res *RerankResult) Ranked(topN int) []int {
	idx := make([]int, len(res.Scores))
	for i := range idx {
		idx[i] = i
	}
	// Sort by the logit: the sigmoid saturates to equal float64 scores long before
	// the logits are equal.
	sort.SliceStable(idx, func(a, b int) bool { return res.Logits[idx[a]] > res.Logits[idx[b]] })
	if topN > 0 && topN < len(idx) {
		idx = idx[:topN]
	}
	return idx
}

// taskErr is the answer to a request for the task the model does not do.
func (r *Router) taskErr() error {
	if r.Config.Rerank {
		return inputErr("model", -1, CodeWrongTask, "This server serves a reranker, which does not make embeddings; send query-document pairs to POST /v1/rerank, or serve an embedding model (Qwen3-Embedding) for embeddings.")
	}
	return inputErr("model", -1, CodeWrongTask, "This server serves an embedding model, which does not rerank; serve a reranker GGUF (Qwen3-Reranker) with `embed-stack serve --model` for /v1/rerank, or compare embeddings.")
}

// Rerank scores each document against the query with a Qwen3-Reranker: every pair
// goes into the model card's chat template and the workers return the logits of
// "yes" and "no" at its last token. The limits are those of Embed, applied to the
// pairs: documents per request (MaxInputs), tokens per pair in its template
// (MaxInputTokens), tokens per request (MaxTotalTokens).
func (r *Router) Rerank(ctx context.Context, req *RerankRequest) (_ *RerankResult, err error) {
	r.init()
	ctx, st := stage.Start(r.withModel(ctx), tracer, "routing.rerank")
	defer func() { st.End(err) }()
	if !r.Config.Rerank {
		return nil, r.taskErr()
	}
	seqs, err := r.preparePairs(ctx, req)
	if err != nil {
		return nil, err
	}
	field, item, _ := req.names()
	if err := r.admissible(seqs, field, item); err != nil {
		return nil, err
	}
	raw, counts, tokens, err := r.run(ctx, seqs)
	if err != nil {
		return nil, err
	}
	res := &RerankResult{Scores: make([]float64, len(raw)), Logits: make([]float64, len(raw)), Tokens: tokens}
	for i, v := range raw {
		if len(v) != 2 {
			return nil, fmt.Errorf("document %d: the worker returned %d values; a reranker returns the logits of yes and no", i, len(v))
		}
		d := float64(v[0]) - float64(v[1])
		res.Logits[i], res.Scores[i] = d, 1/(1+math.Exp(-d))
	}
	r.recordSuccess(ctx, st, counts, 0)
	return res, nil
}

// preparePairs checks a rerank request and returns each pair's token ids.
func (r *Router) preparePairs(ctx context.Context, req *RerankRequest) ([][]int32, error) {
	c := r.Config
	field, item, plural := req.names()
	switch n := len(req.Documents); {
	case strings.TrimSpace(req.Query) == "":
		return nil, inputErr("query", -1, CodeEmptyInput, "'query' must hold text.")
	case n == 0:
		return nil, inputErr(field, -1, CodeEmptyInput, "'%s' must not be empty.", field)
	case n > c.maxInputs():
		return nil, inputErr(field, -1, CodeTooManyInputs, "'%s' holds %d %s; the limit is %d per request. Split the request.", field, n, plural, c.maxInputs())
	}
	limit := c.maxInputTokens()
	if r.Long == nil {
		limit = min(limit, c.warmMaxTokens())
	}
	var pairOf func(doc string) []int32
	if c.CrossEncoder {
		if req.Instruction != nil {
			return nil, inputErr("instruction", -1, CodeInvalidValue, "This reranker is a cross-encoder, which scores the query and the document as they are and takes no instruction; omit 'instruction'.")
		}
		query := r.Tokenizer.Encode(req.Query)
		pairOf = func(doc string) []int32 { return c.Frame.pair(query, r.Tokenizer.Encode(doc)) }
	} else {
		instruction, err := c.instructionOr(req.Instruction)
		if err != nil {
			return nil, err
		}
		prefix, suffix := r.rerankIDs()
		pairOf = func(doc string) []int32 {
			pair := r.Tokenizer.Encode(RerankPair(instruction, req.Query, doc))
			seq := make([]int32, 0, len(prefix)+len(pair)+len(suffix))
			return append(append(append(seq, prefix...), pair...), suffix...)
		}
	}
	_, tok := stage.Start(ctx, tracer, "routing.tokenize")
	seqs := make([][]int32, len(req.Documents))
	total := 0
	var err error
	for i, doc := range req.Documents {
		seq := pairOf(doc)
		if len(seq) > limit && req.Truncate != NoTruncation {
			if cut, ok := longestFit(doc, req.Truncate, limit, pairOf); ok {
				seq = cut
			}
		}
		switch {
		case len(seq) > c.maxInputTokens():
			err = inputErr(field, i, CodeContextLength, "%s with the query makes %d tokens in the reranker's template; the limit is %d tokens per pair (--max-input-tokens). Shorten the document or the query.", item(i), len(seq), c.maxInputTokens())
		case r.Long == nil && len(seq) > c.warmMaxTokens():
			err = inputErr(field, i, CodeContextLength, "%s with the query makes %d tokens in the reranker's template; this server takes at most %d tokens per pair.", item(i), len(seq), c.warmMaxTokens())
		}
		if err != nil {
			break
		}
		total += len(seq)
		if total > c.maxTotalTokens() {
			err = inputErr(field, -1, CodeTooManyTokens, "The request holds more than %d tokens in all (the per-request limit; each document is scored with the query in the reranker's template) by %s. Split the request.", c.maxTotalTokens(), item(i))
			break
		}
		seqs[i] = seq
	}
	endTokenize(tok, len(seqs), total, err)
	if err != nil {
		return nil, err
	}
	return seqs, nil
}

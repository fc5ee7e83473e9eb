// Package routing turns an embeddings request into token sequences and vectors:
// Qwen3 query/document wrapping, tokenization, the token-id policy, request limits,
// the choice between the warm worker and an ephemeral one, fan-out and reassembly in
// input order, Matryoshka truncation and L2 normalisation, and usage.
//
// It knows nothing of HTTP, JSON, processes or cgo: tokenizers and backends are
// small interfaces declared here and implemented elsewhere (package tokenizer,
// package backends), wired together by the embed-stack command.
package routing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// Tokenizer turns text into Qwen3 token ids. Control tokens written in the text must
// come out as plain text, never as control ids.
type Tokenizer interface {
	Encode(text string) []int32
	VocabSize() int
}

// limitedTokenizer is a Tokenizer that can stop early (package tokenizer's can):
// see Router.encode.
type limitedTokenizer interface {
	EncodeLimit(text string, limit int) (ids []int32, complete bool)
}

// TextDecoder turns another vocabulary's token ids back into text (cl100k_base, as
// sent by LangChain Python by default).
type TextDecoder interface {
	Decode(ids []int64) (string, error)
}

// Backend embeds a batch of token sequences, returning raw pooled vectors in order.
// The warm worker implements it.
type Backend interface {
	Embed(ctx context.Context, seqs [][]int32) ([][]float32, error)
}

// SingleBackend embeds one long sequence. The ephemeral worker spawner implements
// it, sizing a process to that sequence.
type SingleBackend interface {
	Embed(ctx context.Context, seq []int32) ([]float32, error)
}

// TokenIDMode says how inputs given as token ids are read.
type TokenIDMode int

const (
	// TokenIDsCl100k (the default) reads ids as tiktoken cl100k_base, decodes them
	// to text and tokenizes that with Qwen's tokenizer. LangChain Python sends
	// cl100k ids by default, and each of them is also a valid Qwen id, so taking them
	// literally would silently embed garbage.
	TokenIDsCl100k TokenIDMode = iota
	// TokenIDsNative takes ids as Qwen3 token ids.
	TokenIDsNative
	// TokenIDsReject refuses token-id inputs.
	TokenIDsReject
)

// ParseTokenIDMode parses the --token-ids flag.
func ParseTokenIDMode(s string) (TokenIDMode, error) {
	switch s {
	case "cl100k":
		return TokenIDsCl100k, nil
	case "native":
		return TokenIDsNative, nil
	case "reject":
		return TokenIDsReject, nil
	}
	return 0, fmt.Errorf("token-ids mode %q is not one of cl100k, native, reject", s)
}

func (m TokenIDMode) String() string {
	switch m {
	case TokenIDsNative:
		return "native"
	case TokenIDsReject:
		return "reject"
	}
	return "cl100k"
}

// Config holds the limits and defaults. Zero values mean the documented defaults.
type Config struct {
	// Dim is the model's native embedding size; required.
	Dim int
	// MinDimensions is the smallest `dimensions` accepted; 0 = 32.
	MinDimensions int
	// MaxInputs per request; 0 = 2048 (OpenAI's limit).
	MaxInputs int
	// MaxTotalTokens per request, summed over inputs after wrapping; 0 = 300000.
	MaxTotalTokens int
	// MaxInputTokens per input after wrapping, the Frame's tokens included; 0 =
	// 32768 (Qwen3-Embedding's training context).
	MaxInputTokens int
	// WarmMaxTokens is the longest input the warm worker takes; longer ones go to an
	// ephemeral worker. 0 = 8192.
	WarmMaxTokens int
	// WarmChunkTokens bounds the tokens of one request sent to the warm worker in
	// one call, so a large request does not hold the worker for its whole duration;
	// 0 = BatchMaxTokens when batching is on, else WarmMaxTokens.
	WarmChunkTokens int
	// BatchWindow turns on cross-request batching of the warm path: a call waits up
	// to this long for calls of other requests to share the worker call with (see
	// batcher), except a lone call on an idle server, which goes at once. 0 = off:
	// every request's chunks go to the worker on their own.
	BatchWindow time.Duration
	// BatchMaxTokens is the token budget of one batched warm call; 0 =
	// DefaultBatchMaxTokens.
	BatchMaxTokens int
	// ShortCalls, when set, says whether the warm backend runs a call of seqs ahead
	// of longer work it is doing (backends.ShortJobs.Fits). The batcher then sends
	// such calls in a lane of their own, beside a batch of documents in flight, so
	// that queries are answered while documents are embedded. nil: one lane.
	ShortCalls func(seqs [][]int32) bool
	// MaxEphemeral bounds the ephemeral workers running at once; 0 =
	// DefaultMaxEphemeral.
	MaxEphemeral int
	// MaxEphemeralTokens bounds the tokens of the inputs ephemeral workers hold at
	// once: each sizes its KV cache to its input, so this bounds their memory. An
	// input larger than the bound runs only when no other does. 0 = no bound beyond
	// MaxEphemeral.
	MaxEphemeralTokens int
	// EphemeralQueue is how many long inputs may wait for an ephemeral worker
	// beyond those running; the next one gets a *BusyError (429). 0 =
	// DefaultEphemeralQueue; negative = none wait.
	EphemeralQueue int
	// MaxInstructionBytes bounds a caller's instruction; 0 = 4096.
	MaxInstructionBytes int
	// DefaultInputType applies when the request names none.
	DefaultInputType InputType
	// DefaultInstruction is the query task when the request gives none; "" =
	// Prompts.Instruction.
	DefaultInstruction string
	// Prompts are the model family's query and document prompts; the zero value is
	// Qwen3-Embedding's (Qwen3Prompts).
	Prompts Prompts
	// Frame is the special tokens around every input; the zero value is
	// Qwen3-Embedding's <|endoftext|> after the text (Qwen3Frame).
	Frame Frame
	// TokenIDs is the token-id input policy.
	TokenIDs TokenIDMode
	// Model is the name the model is served under (its id in GET /v1/models), the
	// model label of the router's metrics and stages (issue 17: several models per
	// server, each with a router of its own). "" = no model label.
	Model string
	// Rerank says the model is a Qwen3-Reranker: the workers return, per sequence,
	// the logits of "yes" and "no" (Dim is 2), Rerank serves requests and Embed and
	// Prepare refuse them. False: an embedding model, and the reverse.
	Rerank bool
	// CrossEncoder says the reranker is a cross-encoder (a BERT with a classifier
	// head): each pair is Frame.Head query Frame.Sep document Frame.Tail, with no
	// template or instruction, and the workers return [logit, 0] per pair, so that
	// the score is the same sigmoid of the difference of the two.
	CrossEncoder bool
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func (c Config) minDimensions() int  { return orDefault(c.MinDimensions, 32) }
func (c Config) maxInputs() int      { return orDefault(c.MaxInputs, 2048) }
func (c Config) maxTotalTokens() int { return orDefault(c.MaxTotalTokens, 300000) }
func (c Config) maxInputTokens() int { return orDefault(c.MaxInputTokens, 32768) }
func (c Config) warmMaxTokens() int  { return orDefault(c.WarmMaxTokens, 8192) }
func (c Config) batchMaxTokens() int { return orDefault(c.BatchMaxTokens, DefaultBatchMaxTokens) }
func (c Config) warmChunkTokens() int {
	if c.WarmChunkTokens > 0 {
		return c.WarmChunkTokens
	}
	if c.BatchWindow > 0 {
		return min(c.warmMaxTokens(), c.batchMaxTokens())
	}
	return c.warmMaxTokens()
}
func (c Config) maxInstructionLen() int { return orDefault(c.MaxInstructionBytes, 4096) }

// instructionOr is the request's instruction, checked, or the default when it
// gives none.
func (c Config) instructionOr(given *string) (string, error) {
	if given == nil {
		return c.instruction(), nil
	}
	if !c.Prompts.TakesInstruction() {
		p := c.Prompts.orQwen3()
		if p.Query == "" {
			return "", inputErr("instruction", -1, CodeInvalidValue, "This model takes no instruction: its prompt convention (%s) puts nothing before a query. Omit 'instruction', or give the model a query prompt with %s (--query-prompt).", p.Family, InstructionPlaceholder)
		}
		return "", inputErr("instruction", -1, CodeInvalidValue, "This model's query prompt (%s: %q) takes no instruction; omit 'instruction', or give the model a query prompt with %s (--query-prompt).", p.Family, p.Query, InstructionPlaceholder)
	}
	instruction := strings.TrimSpace(*given)
	if instruction == "" {
		return "", inputErr("instruction", -1, CodeInvalidValue, "'instruction' must not be empty; omit it to use the default task.")
	}
	if len(instruction) > c.maxInstructionLen() {
		return "", inputErr("instruction", -1, CodeInvalidValue, "'instruction' is %d bytes; the limit is %d.", len(instruction), c.maxInstructionLen())
	}
	return instruction, nil
}

func (c Config) instruction() string {
	if c.DefaultInstruction == "" {
		return c.Prompts.orQwen3().Instruction
	}
	return c.DefaultInstruction
}

// Request is one embeddings request after JSON decoding. Exactly one of Texts and
// TokenIDs is set.
type Request struct {
	Texts    []string
	TokenIDs [][]int64
	// InputType is "query", "document", "passage" or "" for the configured default.
	InputType string
	// Instruction overrides the query task when non-nil. Without an InputType it
	// makes the inputs queries, whatever Config.DefaultInputType says; with
	// InputType "document" it is ignored.
	Instruction *string
	// Dimensions is the output size; 0 = native.
	Dimensions int
	// Truncate shortens inputs over the per-input limit instead of refusing them
	// (truncate.go).
	Truncate Truncation
	// Raw skips the L2 normalisation: the pooled vector is returned as the model
	// computed it, cut to Dimensions (TEI's "normalize": false). Off, the vector is
	// unit-length, as OpenAI's and Ollama's APIs return it.
	Raw bool
	// InputField names the request field that holds the inputs, for error messages
	// and InputError.Param: "" is OpenAI's "input"; POST /embed says "texts", and
	// POST /tokenize "text" for its single string.
	InputField string
}

// names returns the inputs' field and how messages name input i: "input 3" in
// OpenAI's wording, "texts[3]" for another array, 'text' for a single string.
func (req *Request) names() (field string, item func(int) string) {
	switch f := req.InputField; f {
	case "", "input":
		return "input", func(i int) string { return fmt.Sprintf("input %d", i) }
	case "text":
		return f, func(int) string { return "'text'" }
	default:
		return f, func(i int) string { return fmt.Sprintf("%s[%d]", f, i) }
	}
}

// Result is the vectors in input order and the tokens embedded.
type Result struct {
	Vectors [][]float32
	// Tokens is the number of tokens embedded: prompts and the Frame included.
	Tokens int
	// Cached says the router has a cache and consulted it; CachedTokens are the
	// tokens of the inputs it answered (counted in Tokens too), as OpenAI's
	// usage.prompt_tokens_details.cached_tokens reports a prompt cache's.
	Cached       bool
	CachedTokens int
}

// Router runs requests. Its fields are set once before use; it is then safe for
// concurrent use.
type Router struct {
	Config    Config
	Tokenizer Tokenizer
	// Cl100k decodes token-id inputs in TokenIDsCl100k mode.
	Cl100k TextDecoder
	// Warm takes inputs of up to Config.WarmMaxTokens tokens.
	Warm Backend
	// Long takes each longer input alone. When nil, those inputs are refused with
	// a 400 that names the warm limit.
	Long SingleBackend
	// Cache, when set, answers sequences embedded before (cache.go) under
	// Identity, the model file's identity (its sha256); while Identity returns ""
	// (the file is still being hashed), or when it is nil, the cache is skipped.
	Cache    *Cache
	Identity func() string

	initOnce sync.Once
	warm     Backend    // Warm, behind the batcher when Config.BatchWindow > 0
	admit    *admission // bounds the calls to Long
	template rerankTemplate
	metrics  metricOpts // built by init from Config.Model
}

// init builds the batcher and the admission from Config on first use.
func (r *Router) init() {
	r.initOnce.Do(func() {
		r.metrics = newMetricOpts(r.Config.Model)
		r.warm = r.Warm
		if r.Config.BatchWindow > 0 && r.Warm != nil {
			b := newBatcher(r.Warm, r.Config.BatchWindow, r.Config.batchMaxTokens(), r.Config.ShortCalls)
			b.metricOpts = r.metrics.model
			b.idleSend = true
			r.warm = b
		}
		queue := r.Config.EphemeralQueue
		if queue == 0 {
			queue = DefaultEphemeralQueue
		}
		r.admit = newAdmission(orDefault(r.Config.MaxEphemeral, DefaultMaxEphemeral), r.Config.MaxEphemeralTokens, queue)
	})
}

// EphemeralState reports the ephemeral workers running, the tokens they hold and
// the long inputs waiting for one.
func (r *Router) EphemeralState() (running, tokens, queued int) {
	r.init()
	return r.admit.state()
}

// Prepare wraps and tokenizes a request's inputs and checks every limit, without
// embedding anything. It is what POST /tokenize shows.
func (r *Router) Prepare(req *Request) ([][]int32, error) {
	if r.Config.Rerank {
		return nil, r.taskErr()
	}
	return r.prepare(r.withModel(context.Background()), untraced, req)
}

// prepare is Prepare as the stages routing.wrap and routing.tokenize of ctx's
// trace, their spans made by tr.
func (r *Router) prepare(ctx context.Context, tr trace.Tracer, req *Request) ([][]int32, error) {
	c := r.Config
	n := len(req.Texts) + len(req.TokenIDs)
	field, item := req.names()
	switch {
	case n == 0:
		return nil, inputErr(field, -1, CodeEmptyInput, "'%s' must not be empty.", field)
	case n > c.maxInputs():
		e := inputErr(field, -1, CodeTooManyInputs, "'%s' holds %d inputs; the limit is %d per request. Split the request.", field, n, c.maxInputs())
		e.Tokens, e.Limit = n, c.maxInputs()
		return nil, e
	}
	typ := c.DefaultInputType
	switch {
	case req.InputType != "":
		t, err := ParseInputType(req.InputType)
		if err != nil {
			return nil, inputErr("input_type", -1, CodeInvalidValue, "%s.", err.Error())
		}
		typ = t
	case req.Instruction != nil:
		// An instruction only means something for a query; dropping it under a
		// document default would embed what the caller meant as a query as a document.
		typ = Query
	}
	instruction, err := c.instructionOr(req.Instruction)
	if err != nil {
		return nil, err
	}

	seqs := make([][]int32, 0, n)
	total := 0
	add := func(i int, seq []int32, complete bool) error {
		seq = c.Frame.around(seq)
		if !complete {
			return inputErr("input", i, CodeContextLength,
				"This model's maximum context length is %d tokens, however you requested more than %d tokens (more than %d in your prompt; 0 for the completion) in input %d. Please reduce your prompt; or completion length.",
				c.maxInputTokens(), 2*c.maxInputTokens(), 2*c.maxInputTokens(), i)
		}
		if len(seq) > c.maxInputTokens() {
			e := inputErr(field, i, CodeContextLength,
				"This model's maximum context length is %d tokens, however you requested %d tokens (%d in your prompt; 0 for the completion) in %s. Please reduce your prompt; or completion length.",
				c.maxInputTokens(), len(seq), len(seq), item(i))
			e.Tokens, e.Limit = len(seq), c.maxInputTokens()
			return e
		}
		if r.Long == nil && len(seq) > c.warmMaxTokens() {
			return inputErr(field, i, CodeContextLength,
				"%s has %d tokens; this server embeds at most %d tokens per input.", item(i), len(seq), c.warmMaxTokens())
		}
		total += len(seq)
		if total > c.maxTotalTokens() {
			return inputErr(field, -1, CodeTooManyTokens,
				"The request holds more than %d tokens in all (the per-request limit) by %s. Split the request.", c.maxTotalTokens(), item(i))
		}
		seqs = append(seqs, seq)
		return nil
	}

	// Wrapping and tokenizing are two passes so that a trace times each.
	wrap := startWrap(ctx, tr, typ)
	wrapped := make([]string, len(req.Texts))
	for i, text := range req.Texts {
		if text == "" {
			err := inputErr(field, i, CodeEmptyInput, "%s is an empty string; every input must hold text.", item(i))
			wrap.End(err)
			return nil, err
		}
		wrapped[i] = c.Prompts.Wrap(typ, instruction, text)
	}
	wrap.End(nil)
	_, tok := stage.Start(ctx, tr, "routing.tokenize")
	err = func() error {
		for i, text := range wrapped {
			seq, complete := r.encode(text)
			if req.Truncate != NoTruncation && (!complete || len(seq)+c.Frame.Len() > r.inputLimit()) {
				var err error
				if seq, err = r.truncateText(i, typ, instruction, req.Texts[i], r.inputLimit()-c.Frame.Len(), req.Truncate); err != nil {
					return err
				}
				complete = true
			}
			if err := add(i, seq, complete); err != nil {
				return err
			}
		}
		if len(req.TokenIDs) == 0 {
			return nil
		}
		// Token-id inputs are decoded and wrapped here, input by input.
		var prefix []int32
		if p := c.Prompts.Prefix(typ, instruction); p != "" && c.TokenIDs == TokenIDsNative {
			prefix = r.Tokenizer.Encode(p)
		}
		for i, ids := range req.TokenIDs {
			seq, complete, err := r.fromTokenIDs(i, ids, typ, instruction, prefix, req.Truncate)
			if err != nil {
				return err
			}
			if err := add(i, seq, complete); err != nil {
				return err
			}
		}
		return nil
	}()
	endTokenize(tok, len(seqs), total, err)
	if err != nil {
		return nil, err
	}
	return seqs, nil
}

// encode tokenizes one wrapped input. A text more than twice MaxInputTokens long
// is not tokenized to its end (complete is false): a 30 MB text would cost seconds
// and its tokens' memory only to be refused. Up to twice the limit the count is
// exact, so that the refusal says how much to cut.
func (r *Router) encode(text string) (ids []int32, complete bool) {
	if lt, ok := r.Tokenizer.(limitedTokenizer); ok {
		return lt.EncodeLimit(text, 2*r.Config.maxInputTokens())
	}
	return r.Tokenizer.Encode(text), true
}

// fromTokenIDs applies the token-id policy to input i.
// With truncation, an input over the limit is shortened: native ids by dropping
// ids (the query prefix kept), cl100k ids as the text they decode to.
func (r *Router) fromTokenIDs(i int, ids []int64, typ InputType, instruction string, prompt []int32, trunc Truncation) ([]int32, bool, error) {
	if len(ids) == 0 {
		return nil, false, inputErr("input", i, CodeEmptyInput, "input %d is an empty array of token ids.", i)
	}
	switch r.Config.TokenIDs {
	case TokenIDsReject:
		return nil, false, inputErr("input", i, CodeTokenIDsRefused, "This server does not accept token ids as input (--token-ids=reject); send text instead.")
	case TokenIDsNative:
		vocab := int64(r.Tokenizer.VocabSize())
		frame := r.Config.Frame
		seq := make([]int32, 0, len(prompt)+len(ids)+frame.Len())
		seq = append(seq, prompt...)
		for j, id := range ids {
			if id < 0 || id >= vocab {
				return nil, false, inputErr("input", i, CodeInvalidTokenID, "input %d holds token id %d at position %d; valid ids are 0 to %d.", i, id, j, vocab-1)
			}
			seq = append(seq, int32(id))
		}
		if over := len(seq) + frame.Len() - r.inputLimit(); trunc != NoTruncation && over > 0 {
			user := seq[len(prompt):]
			if over >= len(user) {
				return nil, false, inputErr("input", i, CodeContextLength,
					"input %d cannot be truncated to %d tokens and keep any of its ids: the wrapping alone (the prompt and %s) takes %d.", i, r.inputLimit(), frame.orQwen3().Text, len(prompt)+frame.Len())
			}
			if trunc == TruncateStart {
				user = user[over:]
			} else {
				user = user[:len(user)-over]
			}
			seq = append(seq[:len(prompt):len(prompt)], user...)
		}
		return seq, true, nil
	}
	text, err := r.Cl100k.Decode(ids)
	if err != nil {
		return nil, false, inputErr("input", i, CodeInvalidTokenID, "input %d: %v (token ids are read as tiktoken cl100k_base; start the server with --token-ids=native to send Qwen3 ids).", i, err)
	}
	if text == "" {
		return nil, false, inputErr("input", i, CodeEmptyInput, "input %d decodes to an empty string.", i)
	}
	seq, complete := r.encode(r.Config.Prompts.Wrap(typ, instruction, text))
	if trunc != NoTruncation && (!complete || len(seq)+r.Config.Frame.Len() > r.inputLimit()) {
		seq, err := r.truncateText(i, typ, instruction, text, r.inputLimit()-r.Config.Frame.Len(), trunc)
		return seq, true, err
	}
	return seq, complete, nil
}

// Embed runs a request: short inputs go to the warm worker in chunks, long ones each
// to their own ephemeral worker, all at once. The first failure cancels the rest.
func (r *Router) Embed(ctx context.Context, req *Request) (_ *Result, err error) {
	r.init()
	ctx, st := stage.Start(r.withModel(ctx), tracer, "routing.embed")
	defer func() { st.End(err) }()
	if r.Config.Rerank {
		return nil, r.taskErr()
	}
	dims := req.Dimensions
	switch {
	case dims == 0:
		dims = r.Config.Dim
	case dims < r.Config.minDimensions() || dims > r.Config.Dim:
		return nil, inputErr("dimensions", -1, CodeInvalidValue, "'dimensions' must be between %d and %d for this model; got %d.", r.Config.minDimensions(), r.Config.Dim, dims)
	}
	seqs, err := r.prepare(ctx, tracer, req)
	if err != nil {
		return nil, err
	}
	field, item := req.names()
	if err := r.admissible(seqs, field, item); err != nil {
		return nil, err
	}
	raw, counts, tokens, err := r.run(ctx, seqs)
	if err != nil {
		return nil, err
	}

	_, norm := stage.Start(ctx, tracer, "routing.normalize")
	out := make([][]float32, len(raw))
	for i, v := range raw {
		if out[i], err = finish(v, dims, !req.Raw); err != nil {
			err = fmt.Errorf("input %d: %w", i, err)
			norm.End(err)
			return nil, err
		}
	}
	norm.End(nil)
	r.recordSuccess(ctx, st, counts, dims)
	return &Result{Vectors: out, Tokens: tokens, Cached: counts.cached, CachedTokens: counts.cachedTokens}, nil
}

// compute sends seqs to the workers, the short ones to the warm worker in chunks
// and each long one to its own ephemeral worker, all at once, and returns each
// sequence's raw output in order, the routing decision and the tokens sent. The
// first failure cancels the rest.
func (r *Router) compute(ctx context.Context, seqs [][]int32) ([][]float32, routeCounts, int, error) {
	r.init()
	_, route := stage.Start(ctx, tracer, "routing.route")
	raw := make([][]float32, len(seqs))
	var short []int
	tokens := 0
	g, gctx := errgroup.WithContext(ctx)
	for i, seq := range seqs {
		tokens += len(seq)
		if len(seq) <= r.Config.warmMaxTokens() {
			short = append(short, i)
			continue
		}
		g.Go(func() error {
			v, err := r.callLong(gctx, seq)
			if err != nil {
				return fmt.Errorf("input %d (%d tokens, ephemeral worker): %w", i, len(seq), err)
			}
			raw[i] = v
			return nil
		})
	}
	if len(short) > 0 {
		g.Go(func() error { return r.embedWarm(gctx, seqs, short, raw) })
	}
	counts := r.endRoute(route, seqs)
	if err := g.Wait(); err != nil {
		return nil, counts, tokens, err
	}
	return raw, counts, tokens, nil
}

// embedWarm sends the short inputs to the warm worker in chunks of at most
// WarmChunkTokens tokens, one chunk at a time, so that other requests' chunks can
// interleave with a large request's.
func (r *Router) embedWarm(ctx context.Context, seqs [][]int32, idx []int, raw [][]float32) error {
	limit := r.Config.warmChunkTokens()
	for start := 0; start < len(idx); {
		end, n := start, 0
		for end < len(idx) && (end == start || n+len(seqs[idx[end]]) <= limit) {
			n += len(seqs[idx[end]])
			end++
		}
		batch := make([][]int32, end-start)
		for j, i := range idx[start:end] {
			batch[j] = seqs[i]
		}
		vecs, err := r.callWarm(ctx, batch)
		if err != nil {
			return fmt.Errorf("warm worker: %w", err)
		}
		if len(vecs) != len(batch) {
			return fmt.Errorf("warm worker returned %d vectors for %d inputs", len(vecs), len(batch))
		}
		for j, i := range idx[start:end] {
			raw[i] = vecs[j]
		}
		start = end
	}
	return nil
}

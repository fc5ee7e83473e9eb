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
	// Pooling names how the workers make one vector of a sequence ("last",
	// "mean", "cls"; --pooling or the model's): part of the cache's key, since one
	// file served with two poolings gives two vectors per sequence.
	Pooling string
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
	// 0 = BatchMaxTokens when batching is on (however small WarmMaxTokens is: see
	// warmChunkTokens), else WarmMaxTokens.
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

// warmChunkTokens is the token budget of one warm call of a request's own inputs.
// With batching on it is the batch budget, as a batch of other requests' calls
// is, and not capped at WarmMaxTokens: that is the longest single input, and the
// worker takes any number of them in one call. Each call of a chunked request
// leaves the worker idle for a round trip, and the next call then pays for
// waking its threads: on all-MiniLM-L6-v2 (WarmMaxTokens 512, 2 vCPUs of an AMD
// EPYC Zen 5 under KVM) 32 x 128 tokens sent as 8 calls of 512 tokens took 1.02
// to 1.14 times as long (median 1.04, five interleaved runs) as in 2 calls of
// 2048 (docs/performance.md).
func (c Config) warmChunkTokens() int {
	if c.WarmChunkTokens > 0 {
		return c.WarmChunkTokens
	}
	if c.BatchWindow > 0 {
		return c.batchMaxTokens()
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

// Prefix is the text before each input of type t that carries no instruction of
// its own: the query prompt with the default instruction, or the document prompt.
func (c Config) Prefix(t InputType) string { return c.Prompts.Prefix(t, c.instruction()) }

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

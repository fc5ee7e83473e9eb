package routing

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

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
			e := inputErr(field, i, CodeContextLength,
				"This model's maximum context length is %d tokens, however you requested more than %d tokens (more than %d in your prompt; 0 for the completion) in %s. Please reduce your prompt; or completion length.",
				c.maxInputTokens(), 2*c.maxInputTokens(), 2*c.maxInputTokens(), item(i))
			e.Tokens, e.Limit, e.AtLeast = 2*c.maxInputTokens(), c.maxInputTokens(), true
			return e
		}
		if len(seq) > c.maxInputTokens() {
			e := inputErr(field, i, CodeContextLength,
				"This model's maximum context length is %d tokens, however you requested %d tokens (%d in your prompt; 0 for the completion) in %s. Please reduce your prompt; or completion length.",
				c.maxInputTokens(), len(seq), len(seq), item(i))
			e.Tokens, e.Limit = len(seq), c.maxInputTokens()
			return e
		}
		if r.Long == nil && len(seq) > c.warmMaxTokens() {
			e := inputErr(field, i, CodeContextLength,
				"%s has %d tokens; this server embeds at most %d tokens per input.", item(i), len(seq), c.warmMaxTokens())
			e.Tokens, e.Limit = len(seq), c.warmMaxTokens()
			return e
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

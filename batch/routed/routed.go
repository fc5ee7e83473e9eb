// Package routed runs an offline embedding job's batches through a routing.Router:
// the batch.Embedder that embed-stack embed gives batch.Job, the wording of the
// router's refusal of one text for the job (which names items by id and input
// line, not by an index into a request), and which of the router's failures are
// transient. It joins the two packages, which know nothing of each other.
package routed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/embed-stack/embed-stack/batch"
	"github.com/embed-stack/embed-stack/routing"
)

// Embedder is a batch.Embedder over a router: a text the router refuses becomes a
// batch.ItemError with its position in the batch. It is safe for concurrent use,
// as the router is.
type Embedder struct {
	Router *routing.Router
	// Dimensions is the request's dimensions (0: the model's).
	Dimensions int
}

// Embed embeds texts as one request of the router's default input type.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	res, err := e.Router.Embed(ctx, &routing.Request{Texts: texts, Dimensions: e.Dimensions})
	if err == nil {
		return res.Vectors, nil
	}
	var ie *routing.InputError
	if errors.As(err, &ie) && ie.Index >= 0 && ie.Index < len(texts) {
		return nil, &batch.ItemError{Index: ie.Index, Err: itemError(ie)}
	}
	return nil, err
}

// itemError words the router's refusal of one text for the batch job: the job names
// the item by id and input line, so the HTTP API's "input N" (an index into the
// request, here a batch) and its completion wording would only mislead.
func itemError(ie *routing.InputError) error {
	switch ie.Code {
	case routing.CodeContextLength:
		more := ""
		if ie.AtLeast {
			more = "more than "
		}
		return fmt.Errorf("the text has %s%d tokens (the instruction, if any, and the end token included); the limit is %d (--max-input-tokens)", more, ie.Tokens, ie.Limit)
	case routing.CodeEmptyInput:
		return errors.New("the text is empty")
	}
	return ie
}

// Retryable is batch.Job's Retryable for a router: a failure is transient when
// the warm worker is restarting (it died, perhaps of this very batch) or every
// ephemeral slot and queue place is taken, and the batch is tried again after the
// router's Retry-After hint (at least 100 ms), or a second when it gives none.
func Retryable(err error) (time.Duration, bool) {
	var ue *routing.UnavailableError
	var be *routing.BusyError
	switch {
	case errors.As(err, &ue):
		return max(ue.RetryAfter, 100*time.Millisecond), true
	case errors.Is(err, routing.ErrUnavailable):
		return time.Second, true
	case errors.As(err, &be):
		return max(be.RetryAfter, 100*time.Millisecond), true
	}
	return 0, false
}

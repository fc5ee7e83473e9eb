package backends

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnavailable means no worker can serve the request now: the warm worker is
// loading, restarting, or died while serving it. The server answers 503 with a
// Retry-After taken from the [UnavailableError] that wraps it.
var ErrUnavailable = errors.New("worker unavailable")

// ErrClosed is the cause of the [UnavailableError] returned by [Warm.Embed] after
// Close.
var ErrClosed = errors.New("warm worker closed")

// ErrReadyTimeout is wrapped by the error of a worker that made no progress towards
// ready for ReadyTimeout (a hung model load).
var ErrReadyTimeout = errors.New("worker did not become ready")

// UnavailableError is the error returned while no worker can serve a request.
// errors.Is(err, ErrUnavailable) is true for it.
type UnavailableError struct {
	// RetryAfter hints when to try again; 0 means no estimate.
	RetryAfter time.Duration
	// Cause says why the worker is unavailable.
	Cause error

	// undelivered says the call never reached the worker (its socket refused the
	// connection), so it may be sent to a replacement without risk.
	undelivered bool
}

func (e *UnavailableError) Error() string {
	msg := ErrUnavailable.Error()
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// WorkerInputError is returned by [Client.Embed] (and so by [Warm] and [Ephemeral])
// when the worker refused the request as bad input (HTTP 400): an empty or too long
// sequence, or an id outside the vocabulary. The server maps it to 400.
type WorkerInputError struct {
	// Index is the position of the offending sequence in the request, or -1 when the
	// error is about the request as a whole. It is the index within the worker
	// request, which the caller maps back to its own input numbering.
	Index int
	// Message says what is wrong, without naming the index.
	Message string
}

func (e *WorkerInputError) Error() string {
	if e.Index < 0 {
		return "worker refused the request: " + e.Message
	}
	return fmt.Sprintf("worker refused sequence %d: %s", e.Index, e.Message)
}

// InputError is an engine's refusal of one sequence. An [Engine] may return it (or
// any error for which errors.As finds a value with the method InputIndex() int, and
// optionally InputReason() string), and the worker handler answers 400 with that
// index. The interface match, rather than this type, is what lets the cgo engine in
// backends/llama report input errors of its own type without this package importing
// it.
type InputError struct {
	Index  int    // position of the sequence in the Embed call
	Reason string // what is wrong, with the limit that applies
}

func (e *InputError) Error() string { return fmt.Sprintf("sequence %d: %s", e.Index, e.Reason) }

// InputIndex returns Index; see [InputError].
func (e *InputError) InputIndex() int { return e.Index }

// InputReason returns Reason; see [InputError].
func (e *InputError) InputReason() string { return e.Reason }

// inputIndexer is what the handler looks for with errors.As to recognise an input
// error of any engine.
type inputIndexer interface{ InputIndex() int }

// inputReasoner optionally gives the reason without the index.
type inputReasoner interface{ InputReason() string }

// asInputError reports whether err is an engine input error and returns its index
// and reason.
func asInputError(err error) (index int, reason string, ok bool) {
	var ii inputIndexer
	if !errors.As(err, &ii) {
		return 0, "", false
	}
	if r, isR := ii.(inputReasoner); isR {
		return ii.InputIndex(), r.InputReason(), true
	}
	// errors.As only matches values of err's chain, so ii is an error.
	if e, isErr := ii.(error); isErr {
		return ii.InputIndex(), e.Error(), true
	}
	return ii.InputIndex(), fmt.Sprint(ii), true
}

// ExitError reports a worker process that exited (or was killed) when it was
// expected to keep running. It carries the tail of the worker's output, which is
// where llama.cpp says why it aborted.
type ExitError struct {
	PID    int
	Err    error  // from exec.Cmd.Wait; nil when the worker exited with status 0
	Output string // the last few KiB of the worker's stderr and stdout
}

func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "worker (pid %d) exited", e.PID)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	} else {
		b.WriteString(" with status 0")
	}
	if out := strings.TrimSpace(e.Output); out != "" {
		b.WriteString("; its output ends with:\n")
		b.WriteString(out)
	}
	return b.String()
}

// Unwrap returns the wait error.
func (e *ExitError) Unwrap() error { return e.Err }

// DimensionError is a worker whose vectors are not the width the caller expects
// ([Warm.NEmbd], [Ephemeral.NEmbd]): it runs another model than the one whose
// header the server read (a --mlx-model that does not match --model, say), and its
// vectors would be truncated or refused one request at a time.
type DimensionError struct {
	PID   int
	NEmbd int // what the worker reports in /health
	Want  int
}

func (e *DimensionError) Error() string {
	return fmt.Sprintf("the worker (pid %d) computes %d-dimensional vectors, but the model has %d: is it running another model?", e.PID, e.NEmbd, e.Want)
}

// CapacityError is a worker that holds shorter sequences than its caller needs
// ([Warm.MinTokens]): started with a context its engine capped (a model trained on
// a shorter context, a worker program with its own limit), it would refuse every
// longer input.
type CapacityError struct {
	PID       int
	MaxTokens int // what the worker reports in /health
	Want      int // Warm.MinTokens
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("the worker (pid %d) holds sequences of at most %d tokens (its max_tokens), fewer than the %d it must take", e.PID, e.MaxTokens, e.Want)
}

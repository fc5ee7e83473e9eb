package routing

import (
	"errors"
	"fmt"
	"time"
)

// InputError is a request the caller must change: package server answers it with
// 400 and OpenAI's envelope. Param is the request field at fault; Index is the
// input it concerns, or -1.
type InputError struct {
	Param   string
	Index   int
	Code    string
	Message string
	// Tokens and Limit are, for CodeContextLength, the input's tokens (wrapping and
	// EOS included) and the limit it exceeds, and for CodeTooManyInputs the inputs
	// and their limit, for callers that word their own message (TEI's and Ollama's
	// APIs answer in their servers' words).
	Tokens, Limit int
	// AtLeast says Tokens is a lower bound: the text was not tokenized to its end
	// (Router.encode stops at twice the limit).
	AtLeast bool
}

func (e *InputError) Error() string { return e.Message }

// Error codes carried in InputError.Code (OpenAI's own where one exists).
const (
	CodeContextLength   = "context_length_exceeded"
	CodeTooManyInputs   = "too_many_inputs"
	CodeTooManyTokens   = "too_many_tokens"
	CodeEmptyInput      = "empty_input"
	CodeInvalidTokenID  = "invalid_token_id"
	CodeTokenIDsRefused = "token_ids_not_supported"
	CodeInvalidValue    = "invalid_value"
	// CodeWrongTask: a rerank request to an embedding model, or the reverse.
	CodeWrongTask = "model_task_mismatch"
	// CodeTooManyLongInputs: more inputs over the warm limit than the ephemeral
	// admission ever holds at once, a request no retry could get admitted.
	CodeTooManyLongInputs = "too_many_long_inputs"
)

func inputErr(param string, index int, code, format string, args ...any) *InputError {
	return &InputError{Param: param, Index: index, Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrUnavailable means no backend can take the work right now (the warm worker is
// starting or restarting). Errors that match it with errors.Is may carry a
// RetryAfter hint through *UnavailableError.
var ErrUnavailable = errors.New("the embedding worker is not ready")

// UnavailableError is ErrUnavailable with a hint for the Retry-After header.
type UnavailableError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return ErrUnavailable.Error()
	}
	return ErrUnavailable.Error() + ": " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

package llama

import (
	"errors"
	"fmt"
)

// ErrInvalidInput is what every *InputError unwraps to, so a caller can map all of
// them to one status (400 in the worker protocol) with errors.Is.
var ErrInvalidInput = errors.New("invalid input")

// ErrClosed is returned by Embed once Close has been called.
var ErrClosed = errors.New("llama: engine closed")

// InputError says which sequence of an Embed call was refused and why. Embed checks
// every sequence before any of them reaches llama.cpp: an out-of-vocabulary id would
// otherwise trip a GGML_ASSERT and abort the whole process.
type InputError struct {
	Index  int    // position of the sequence in the Embed call
	Reason string // what is wrong, with the limit that applies
}

func (e *InputError) Error() string {
	return fmt.Sprintf("input %d: %s", e.Index, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidInput) true.
func (e *InputError) Unwrap() error { return ErrInvalidInput }

// InputIndex returns Index. With InputReason it is the method set the worker
// handler (package backends) looks for with errors.As to answer 400 naming the
// sequence, rather than 500, without that package importing this cgo one.
func (e *InputError) InputIndex() int { return e.Index }

// InputReason returns Reason, the message without the index, which the worker
// protocol carries in its own "index" field.
func (e *InputError) InputReason() string { return e.Reason }

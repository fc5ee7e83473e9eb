package routed

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/routing"
)

// TestRetryable pins which router failures a batch job waits out, and for how long.
func TestRetryable(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		wait  time.Duration
		retry bool
	}{
		{"unavailable with a hint", &routing.UnavailableError{RetryAfter: 3 * time.Second}, 3 * time.Second, true},
		{"unavailable, hint under the floor", &routing.UnavailableError{RetryAfter: time.Millisecond}, 100 * time.Millisecond, true},
		{"plain ErrUnavailable, wrapped", fmt.Errorf("warm: %w", routing.ErrUnavailable), time.Second, true},
		{"busy", &routing.BusyError{RetryAfter: 2 * time.Second, Running: 1, Queued: 8}, 2 * time.Second, true},
		{"busy without a hint", &routing.BusyError{}, 100 * time.Millisecond, true},
		{"a refused input", &routing.InputError{Code: routing.CodeEmptyInput}, 0, false},
		{"anything else", errors.New("worker said no"), 0, false},
	}
	for _, tt := range tests {
		wait, retry := Retryable(tt.err)
		if wait != tt.wait || retry != tt.retry {
			t.Errorf("%s: Retryable = %v, %t; want %v, %t", tt.name, wait, retry, tt.wait, tt.retry)
		}
	}
}

// TestItemError pins the job's wording of a refused text: no "input N", which
// would name a position in a batch the user never sees.
func TestItemError(t *testing.T) {
	tests := []struct {
		ie   *routing.InputError
		want string
	}{
		{&routing.InputError{Code: routing.CodeContextLength, Index: 3, Tokens: 40211, Limit: 32768, Message: "input 3 has 40211 tokens"},
			"the text has 40211 tokens (the instruction, if any, and the end token included); the limit is 32768 (--max-input-tokens)"},
		{&routing.InputError{Code: routing.CodeEmptyInput, Index: 0, Message: "input 0 is empty"}, "the text is empty"},
		{&routing.InputError{Code: "invalid_value", Message: "input 2: something else"}, "input 2: something else"},
	}
	for _, tt := range tests {
		if got := itemError(tt.ie).Error(); got != tt.want {
			t.Errorf("itemError(%s) = %q; want %q", tt.ie.Code, got, tt.want)
		}
	}
}

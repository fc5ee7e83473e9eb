package hub

import "errors"

// Error kinds. Every error Resolve returns for a Hub reference is an *Error whose Kind
// is one of these, so callers can branch with errors.Is while the message itself says
// what to do.
var (
	// ErrNotFound: the repository, revision or file does not exist (or is not visible
	// to the token used), or no .gguf file matches the reference.
	ErrNotFound = errors.New("not found on the hub")
	// ErrUnauthorized: the Hub refused access (401/403): a private or gated repository
	// and no token, or a token without access.
	ErrUnauthorized = errors.New("access to the hub refused")
	// ErrAmbiguous: the reference matches several .gguf files and names none of them.
	ErrAmbiguous = errors.New("ambiguous model file")
	// ErrChecksum: the downloaded bytes do not have the sha256 the Hub announced.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrNotCached: offline mode is on and the cache does not hold the file.
	ErrNotCached = errors.New("not in the local cache")
	// ErrNetwork: the Hub or its CDN could not be reached, the connection broke, or it
	// answered with a server error or a rate limit; trying again later may work.
	ErrNetwork = errors.New("hub unreachable")
	// ErrCache: the cache folder cannot be found, read or written.
	ErrCache = errors.New("cache unusable")
	// ErrHub: the Hub answered something this package cannot use (an unexpected status,
	// malformed JSON, missing or unsafe headers).
	ErrHub = errors.New("unexpected hub response")
)

// Error is an actionable failure: Msg is the whole message shown to the user, Kind one
// of the Err* sentinels and Err the underlying cause, if any (its text is already part
// of Msg). Both Kind and Err are reachable through errors.Is and errors.As.
type Error struct {
	Kind error
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap exposes the kind and the cause, so errors.Is(err, ErrNetwork) and
// errors.Is(err, context.Canceled) both work.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

package hub

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultEndpoint is the Hugging Face Hub, used when Options.Endpoint is empty.
const DefaultEndpoint = "https://huggingface.co"

// Options configure Resolve. The zero value works: the public Hub, anonymous, the
// default cache folder, progress lines through slog.Default().
type Options struct {
	// Endpoint is the Hub's base URL (HF_ENDPOINT), e.g. a mirror. "" means
	// DefaultEndpoint.
	Endpoint string
	// Token is a Hugging Face access token (HF_TOKEN), sent as a bearer token to the
	// Endpoint host only, never to the CDN hosts downloads are redirected to. "" means
	// anonymous, which is enough for public repositories.
	Token string
	// CacheDir is the Hub cache, the folder holding models--{owner}--{name}
	// (HF_HUB_CACHE). "" means ~/.cache/huggingface/hub, huggingface_hub's default.
	CacheDir string
	// Offline (HF_HUB_OFFLINE=1) makes Resolve use only the cache and never the network.
	Offline bool
	// HTTPClient makes every request; its CheckRedirect is replaced (a copy is used) so
	// that the token never follows a redirect to another host. nil means a client with
	// connect and response-header timeouts but no overall timeout, since a download may
	// take many minutes.
	HTTPClient *http.Client
	// StallTimeout is how long a download may receive nothing before the connection is
	// dropped and the download resumed on a new one. 0 means 60 seconds.
	StallTimeout time.Duration
	// Progress receives a progress bar redrawn in place on one line when IsTerminal is
	// true. nil, or IsTerminal false, means progress goes to Logger instead: one line per
	// 10% downloaded.
	Progress io.Writer
	// IsTerminal says Progress is an interactive terminal that understands '\r'.
	IsTerminal bool
	// Logger receives progress lines (when there is no terminal bar) and warnings, such
	// as falling back to the cache when the Hub is unreachable. nil means slog.Default().
	Logger *slog.Logger
}

const (
	defaultStallTimeout = 60 * time.Second
	// maxRedirects bounds the CDN redirect chain; the Hub uses one.
	maxRedirects = 10
)

// OptionsFromEnv reads the environment variables huggingface_hub reads, so both tools
// share one configuration and one cache:
//
//	HF_ENDPOINT                   Endpoint
//	HF_TOKEN                      Token (legacy: HUGGING_FACE_HUB_TOKEN)
//	HF_HUB_OFFLINE=1              Offline (also true/yes/on)
//	HF_HUB_CACHE                  CacheDir (legacy: HUGGINGFACE_HUB_CACHE),
//	  else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub
//
// Progress, IsTerminal and Logger are the caller's to set. It is meant for main: nothing
// else in this package reads the environment.
func OptionsFromEnv() Options { return optionsFromEnv(os.Getenv) }

func optionsFromEnv(getenv func(string) string) Options {
	o := Options{
		Endpoint: strings.TrimRight(strings.TrimSpace(getenv("HF_ENDPOINT")), "/"),
		Token:    firstNonEmpty(getenv("HF_TOKEN"), getenv("HUGGING_FACE_HUB_TOKEN")),
		Offline:  truthy(getenv("HF_HUB_OFFLINE")),
	}
	switch {
	case getenv("HF_HUB_CACHE") != "":
		o.CacheDir = getenv("HF_HUB_CACHE")
	case getenv("HUGGINGFACE_HUB_CACHE") != "":
		o.CacheDir = getenv("HUGGINGFACE_HUB_CACHE")
	case getenv("HF_HOME") != "":
		o.CacheDir = filepath.Join(getenv("HF_HOME"), "hub")
	case getenv("XDG_CACHE_HOME") != "":
		o.CacheDir = filepath.Join(getenv("XDG_CACHE_HOME"), "huggingface", "hub")
	}
	o.Token = strings.TrimSpace(o.Token)
	return o
}

// Dir is the Hub cache folder: CacheDir, else huggingface_hub's default
// ~/.cache/huggingface/hub.
func (o Options) Dir() (string, error) {
	if o.CacheDir != "" {
		return o.CacheDir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", &Error{Kind: ErrCache, Msg: "cannot locate the Hugging Face cache: no home folder; set HF_HUB_CACHE or HF_HOME", Err: err}
	}
	return filepath.Join(home, ".cache", "huggingface", "hub"), nil
}

// truthy parses a boolean environment variable the way huggingface_hub does.
func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

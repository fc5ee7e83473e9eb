package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// Routes that stay open when API keys are set: probes of orchestrators and load
// balancers carry no credentials. /metrics joins them unless Config.MetricsAuth.
const (
	routeHealth  = "/health"
	routeReady   = "/ready"
	routeMetrics = "/metrics"
)

// Messages of the two 401s, in OpenAI's words where it has them. Neither quotes
// the key that was sent: error messages reach the request log.
const (
	msgMissingKey = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
	msgInvalidKey = "Incorrect API key provided. The server accepts only the keys it was started with (--api-key, --api-key-file)."
)

// keyDigest is what a key is compared as: hashing first makes every comparison
// the same length, so the time taken says nothing about a key's length or prefix.
type keyDigest [sha256.Size]byte

func digest(key string) keyDigest { return sha256.Sum256([]byte(key)) }

// authenticate returns the middleware that requires `Authorization: Bearer KEY`
// with one of Config.APIKeys, or nil when no key is configured. It answers 401 in
// OpenAI's envelope: code null when no key was sent, "invalid_api_key" for a wrong
// one, as OpenAI does.
func (s *Server) authenticate() gin.HandlerFunc {
	if len(s.Config.APIKeys) == 0 {
		return nil
	}
	keys := make([]keyDigest, len(s.Config.APIKeys))
	for i, k := range s.Config.APIKeys {
		keys[i] = digest(k)
	}
	return func(c *gin.Context) {
		if s.openRoute(c.Request.Method, c.FullPath()) {
			c.Next()
			return
		}
		token, ok := bearerToken(c.GetHeader("Authorization"))
		switch {
		case !ok:
			unauthorized(c, "", msgMissingKey)
		case !keyMatches(keys, token):
			unauthorized(c, "invalid_api_key", msgInvalidKey)
		default:
			c.Next()
		}
	}
}

// openRoute says whether a matched route needs no key. FullPath is the route
// pattern gin matched ("" for an unknown path), so "/health/" or "//health" cannot
// sneak past as a near-miss spelling. The root is open to GET and HEAD only
// (Ollama's liveness answer); POST / embeds.
func (s *Server) openRoute(method, route string) bool {
	switch route {
	case routeHealth, routeReady:
		return true
	case "/":
		return method == http.MethodGet || method == http.MethodHead
	case routeMetrics:
		return !s.Config.MetricsAuth
	}
	return false
}

// bearerToken extracts the token of an RFC 6750 Authorization header; the scheme
// name is case-insensitive.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// keyMatches compares token with every key, without stopping at a match, in
// constant time per key.
func keyMatches(keys []keyDigest, token string) bool {
	d := digest(token)
	match := 0
	for i := range keys {
		match |= subtle.ConstantTimeCompare(keys[i][:], d[:])
	}
	return match == 1
}

func unauthorized(c *gin.Context, code, msg string) {
	c.Header("WWW-Authenticate", `Bearer realm="embed-stack"`)
	writeError(c, &statusError{status: http.StatusUnauthorized, code: code, msg: msg})
}

package server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// LocalOrigins are the browser origins allowed by default: pages served from
// this machine (any port) and the app and editor schemes of desktop clients and
// browser extensions, as Ollama allows by default (its OLLAMA_ORIGINS adds to
// the same list), so that the browser UIs and extensions written for Ollama or
// OpenAI's JS SDK reach a local server. A pattern's * matches any run of
// characters.
var LocalOrigins = []string{
	"http://localhost", "https://localhost", "http://localhost:*", "https://localhost:*",
	"http://127.0.0.1", "https://127.0.0.1", "http://127.0.0.1:*", "https://127.0.0.1:*",
	"http://0.0.0.0", "https://0.0.0.0", "http://0.0.0.0:*", "https://0.0.0.0:*",
	"http://[::1]", "https://[::1]", "http://[::1]:*", "https://[::1]:*",
	"app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*",
	"chrome-extension://*", "moz-extension://*", "safari-web-extension://*",
}

// exposedHeaders are the response headers a page's script may read besides the
// CORS-safelisted ones.
const exposedHeaders = "Retry-After, X-Request-Id, X-Compute-Tokens, Traceparent"

// cors returns the middleware that answers browsers' cross-origin requests
// (Config.CORSOrigins), or nil when none are configured. A request from an origin
// in the list, or from the server's own (its /docs page), gets
// Access-Control-Allow-Origin, and its preflight (OPTIONS with
// Access-Control-Request-Method) 204 before authentication, since browsers send
// no credentials on one. A request from any other page gets 403, as Ollama
// answers: a web page must not use a local server the user did not open to it.
// Requests without an Origin header (every non-browser client) pass untouched.
func (s *Server) cors() gin.HandlerFunc {
	if len(s.Config.CORSOrigins) == 0 {
		return nil
	}
	patterns := s.Config.CORSOrigins
	return func(c *gin.Context) {
		origin := c.GetHeader("Origin")
		if origin == "" {
			return
		}
		h := c.Writer.Header()
		h.Add("Vary", "Origin")
		if !sameOrigin(origin, c.Request.Host) && !originAllowed(patterns, origin) {
			writeError(c, &statusError{status: http.StatusForbidden, code: "origin_not_allowed",
				msg: "Requests from the web page at " + origin + " are not allowed; start the server with --cors-origin " + origin + " to allow them."})
			c.Abort()
			return
		}
		h.Set("Access-Control-Allow-Origin", origin)
		if c.Request.Method == http.MethodOptions && c.GetHeader("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, HEAD, OPTIONS")
			if req := c.GetHeader("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
				h.Add("Vary", "Access-Control-Request-Headers")
			}
			h.Set("Access-Control-Max-Age", "7200")
			c.AbortWithStatus(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", exposedHeaders)
	}
}

// sameOrigin says whether origin names the host the request was sent to: a page
// of this server's (/docs) calling it is not cross-origin.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, host)
}

// originAllowed says whether origin matches one of the patterns: "*" alone
// matches every origin, and a * within a pattern any run of characters.
func originAllowed(patterns []string, origin string) bool {
	for _, p := range patterns {
		if p == "*" || globMatch(strings.ToLower(p), strings.ToLower(origin)) {
			return true
		}
	}
	return false
}

// globMatch matches s against a pattern whose only special character is *.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

package server

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/internal/buildinfo"
)

// openAPIDoc is the OpenAPI 3.1 description of every route Handler installs. It is
// written by hand and checked against the code: openapi_test.go fails when a route,
// a request field or a response field exists in one and not the other, and the
// schemathesis run of `make test` (conformance/openapi_fuzz_test.go) checks every
// answer of the real binary against it.
//
//go:embed openapi.json
var openAPIDoc []byte

// docsPage is GET /docs: one self-contained HTML file that renders /openapi.json
// with a little inline JavaScript, so it works offline (no CDN).
//
//go:embed docs.html
var docsPage []byte

// describeRoutes installs GET /info, /openapi.json and /docs.
func (s *Server) describeRoutes(r gin.IRoutes) {
	doc := s.openAPI()
	r.GET("/info", s.info)
	r.GET("/openapi.json", func(c *gin.Context) { c.Data(http.StatusOK, "application/json", doc) })
	r.GET("/docs", func(c *gin.Context) { c.Data(http.StatusOK, "text/html; charset=utf-8", docsPage) })
}

// openAPI returns the document with this server's figures filled in: the build's
// version, and the dimensions and input-count bounds of the served model, so that a
// client (or a fuzzer) generating requests from it stays within what the server
// accepts.
func (s *Server) openAPI() []byte {
	parsed, err := decodeOrdered(openAPIDoc)
	doc, ok := parsed.(*ordered)
	if err != nil || !ok {
		panic(fmt.Sprintf("server: openapi.json is not a JSON object: %v", err)) // a test parses it
	}
	set := func(v any, path ...string) {
		if err := doc.set(v, path...); err != nil {
			panic("server: openapi.json: " + err.Error())
		}
	}
	set(buildinfo.Get().Version, "info", "version")
	if len(s.Info.Models) > 0 {
		lim := s.Info.Models[0].Limits
		dims := []string{"components", "schemas", "Dimensions"}
		set(lim.MinDimensions, append(dims, "minimum")...)
		set(lim.Dim, append(dims, "maximum")...)
		set(lim.MaxInputs, "components", "schemas", "TextInputs", "maxItems")
		set(lim.MaxInputs, "components", "schemas", "TokenInputs", "maxItems")
		set(lim.MaxInputs, "components", "schemas", "RerankRequest", "properties", "documents", "maxItems")
		set(lim.MaxInputs, "components", "schemas", "TEIRerankRequest", "properties", "texts", "maxItems")
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic("server: openapi.json: " + err.Error())
	}
	return out
}

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
	union := s.openAPI(nil)
	perModel := map[*ModelInfo][]byte{}
	for i := range s.Info.Models {
		perModel[&s.Info.Models[i]] = s.openAPI(&s.Info.Models[i])
	}
	r.GET("/info", s.info)
	r.GET("/openapi.json", func(c *gin.Context) {
		name, asked := c.GetQuery("model")
		if !asked {
			c.Data(http.StatusOK, "application/json", union)
			return
		}
		m, _, err := s.resolve(name, taskAny)
		var info *ModelInfo
		if err == nil && name != "" {
			info = s.modelInfo(m.ID)
		}
		if info == nil {
			writeError(c, modelNotFound(name))
			return
		}
		c.Data(http.StatusOK, "application/json", perModel[info])
	})
	r.GET("/docs", func(c *gin.Context) { c.Data(http.StatusOK, "text/html; charset=utf-8", docsPage) })
}

// openAPI returns the document with this server's figures filled in: the build's
// version, and the dimensions and input-count bounds, so that a client (or a fuzzer)
// generating requests from it stays within what the server accepts. For one model
// (m) the bounds are that model's; for the server (m nil) they are the widest any
// served model takes, embedding models alone for dimensions (issue 28: the first
// model's were given, 64 when another model took 1024, or a reranker's 2).
func (s *Server) openAPI(m *ModelInfo) []byte {
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
	if !s.Config.DebugVars {
		if err := doc.remove("/debug/vars", "paths"); err != nil {
			panic("server: openapi.json: " + err.Error())
		}
	}
	models := s.Info.Models
	if m != nil {
		models = []ModelInfo{*m}
	}
	if len(models) > 0 {
		minDims, maxDims, maxInputs := 0, 0, 0
		dimsOf := func(mi ModelInfo) {
			if mi.Task == "rerank" {
				return // a reranker takes no dimensions
			}
			if minDims == 0 || mi.MinDimensions < minDims {
				minDims = mi.MinDimensions
			}
			maxDims = max(maxDims, mi.Dim)
		}
		for _, mi := range models {
			maxInputs = max(maxInputs, mi.MaxInputs)
			dimsOf(mi)
		}
		if maxDims == 0 {
			// A reranker's own document: the embedding routes in it take the
			// server's embedding models' dimensions.
			for _, mi := range s.Info.Models {
				dimsOf(mi)
			}
		}
		if maxDims > 0 {
			dims := []string{"components", "schemas", "Dimensions"}
			set(minDims, append(dims, "minimum")...)
			set(maxDims, append(dims, "maximum")...)
			tei := []string{"components", "schemas", "TEIEmbedRequest", "properties", "dimensions"}
			set(minDims, append(tei, "minimum")...)
			set(maxDims, append(tei, "maximum")...)
		}
		for _, path := range [][]string{
			{"TextInputs", "maxItems"},
			{"TokenInputs", "maxItems"},
			{"NativeRequest", "properties", "texts", "maxItems"},
			{"OllamaEmbedRequest", "properties", "input", "anyOf", "1", "maxItems"},
			{"TEIEmbedRequest", "properties", "inputs", "anyOf", "1", "maxItems"},
			{"RerankRequest", "properties", "documents", "maxItems"},
			{"TEIRerankRequest", "properties", "texts", "maxItems"},
		} {
			set(maxInputs, append([]string{"components", "schemas"}, path...)...)
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic("server: openapi.json: " + err.Error())
	}
	return out
}

package server

import (
	"net/http"
	"strings"

	"github.com/embed-stack/embed-stack/routing"
)

// splitModel separates an input-type suffix from a model name, so that two client
// instances ("m:query", "m:document") can embed queries and documents without any
// extra request fields: for LangChain's and LlamaIndex's OpenAI classes the model
// name is the only field a user sets.
//
// The suffix is read as input_type and the header are: case-insensitive, with
// "passage" for document ("m:Query" is a query). A suffix that is not an input type
// is refused when what precedes it is a model served here ("qwen3-embedding-0.6b:search"),
// because a typo there would otherwise embed every query as a document and quietly
// lower search quality. On other names a colon is part of the label
// ("nomic-embed-text:latest"), which the server echoes back as any unknown name.
func (s *Server) splitModel(model string) (base, inputType string, err error) {
	i := strings.LastIndexByte(model, ':')
	if i < 0 {
		return model, "", nil
	}
	base, suffix := model[:i], model[i+1:]
	if _, perr := routing.ParseInputType(suffix); perr == nil {
		return base, suffix, nil
	}
	if s.knownModel(base) && !s.knownModel(model) {
		return "", "", &statusError{status: http.StatusBadRequest, param: "model", code: "invalid_value",
			msg: "The model suffix `:" + suffix + "` is not an input type; use `" + base + ":query`, `" + base + ":document` or `" + base + ":passage` (case-insensitive), or send input_type."}
	}
	return model, "", nil
}

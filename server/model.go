package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/embed-stack/embed-stack/routing"
)

// CheckModelName refuses a name (or alias) that requests could not reach under
// resolve's rule: an empty name, and one ending in an input-type suffix (":query",
// ":document", ":passage", in any case), which a request would read as another
// model's name with an input type (issue 28: --model a:query=... was listed by GET
// /v1/models but /v1/embeddings sent "a:query" to "a" as a query, while /v1/rerank
// sent it to "a:query"). The embed-stack command calls it for every name at start.
func CheckModelName(name string) error {
	if name == "" {
		return errors.New("a model name must not be empty")
	}
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		if _, err := routing.ParseInputType(name[i+1:]); err == nil {
			return fmt.Errorf("the model name %q ends in the input-type suffix %q, which a request reads as the model %q with input_type %s; choose a name without it", name, name[i:], name[:i], strings.ToLower(name[i+1:]))
		}
	}
	return nil
}

// resolve is the one rule that turns a request's model name into a served model, on
// every route that takes a name (/v1/embeddings, /v1/rerank, /v2/rerank,
// /v1/models/{id}, /openapi.json?model=) and for the routes without one ("": the
// default model of the route's task). It returns the input type a suffix set.
//
// An input-type suffix ("m:query", "m:Document", "m:passage"; case-insensitive, as
// input_type and the header are read) sets the input type, so that two client
// instances can embed queries and documents with nothing but the model name, the
// only field LangChain's and LlamaIndex's OpenAI classes let a user set. No served
// name ends in such a suffix (the embed-stack command refuses one at start), so a
// name never means two things. The rule:
//
//   - absent: the first model doing t (the first model when none does);
//   - a suffix with nothing before it (":query") names no model: 400;
//   - a suffix that is not an input type on a name served here
//     ("qwen3-embedding-0.6b:search") is refused (400): a typo there would embed every
//     query as a document and quietly lower search quality; on other names a colon
//     is part of the label ("nomic-embed-text:latest");
//   - a name that is no model's is 404 model_not_found with several models or
//     --strict-model; a single model otherwise takes any name, since clients such as
//     LangChain send their own default (text-embedding-ada-002);
//   - with several models, a model of the other task is 400 model_task_mismatch
//     naming the endpoint that serves it;
//   - a reranker takes no input type, so a suffix on a reranker's name is refused
//     (400 on the rerank routes; /v1/models/{id} answers 404 for it, as for any name
//     no route accepts).
//
// t is the route's task; taskAny (/v1/models/{id}) accepts a model of either task
// under the same rule.
func (s *Server) resolve(asked string, t task) (*Model, string, error) {
	models := s.registry()
	if asked == "" {
		for i := range models {
			if t == taskAny || models[i].Rerank == (t == taskRerank) {
				return &models[i], "", nil
			}
		}
		return &models[0], "", nil
	}
	base, inputType := asked, ""
	if i := strings.LastIndexByte(asked, ':'); i >= 0 {
		prefix, suffix := asked[:i], asked[i+1:]
		if _, err := routing.ParseInputType(suffix); err == nil {
			base, inputType = prefix, suffix
		} else if s.knownModel(prefix) && !s.knownModel(asked) {
			return nil, "", &statusError{status: http.StatusBadRequest, param: "model", code: "invalid_value",
				msg: "The model suffix `:" + suffix + "` is not an input type; use `" + prefix + ":query`, `" + prefix + ":document` or `" + prefix + ":passage` (case-insensitive), or send input_type."}
		}
	}
	if base == "" {
		return nil, "", &statusError{status: http.StatusBadRequest, param: "model", code: "invalid_value",
			msg: "The model `" + asked + "` has no name before its input-type suffix; name a model (GET /v1/models lists them), as in `NAME" + asked + "`, or leave the field out for the default."}
	}
	m := s.lookup(base)
	if m == nil {
		if len(models) > 1 || s.Config.StrictModel {
			return nil, "", modelNotFound(asked)
		}
		m = &models[0]
	}
	if len(models) > 1 && t != taskAny && m.Rerank != (t == taskRerank) {
		if m.Rerank {
			return nil, "", &statusError{status: http.StatusBadRequest, param: "model", code: routing.CodeWrongTask,
				msg: "The model `" + asked + "` is a reranker, which does not make embeddings; send query-document pairs to POST /v1/rerank, or name an embedding model (GET /v1/models lists them)."}
		}
		return nil, "", &statusError{status: http.StatusBadRequest, param: "model", code: routing.CodeWrongTask,
			msg: "The model `" + asked + "` is an embedding model, which does not rerank; name a reranker (GET /v1/models lists them), or compare embeddings."}
	}
	if m.Rerank && inputType != "" {
		return nil, "", &statusError{status: http.StatusBadRequest, param: "model", code: "invalid_value",
			msg: "The model `" + base + "` is a reranker, which takes no input type; send `" + base + "` without the suffix `:" + inputType + "`."}
	}
	return m, inputType, nil
}

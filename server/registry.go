package server

import (
	"net/http"

	"github.com/embed-stack/embed-stack/routing"
)

// Model is one model served under its names (issue 17: several models behind one
// address). Server.Models lists them; a request's "model" field picks one.
type Model struct {
	// ID is the name /v1/models lists first and answers echo when a request names
	// none; Aliases are further accepted names.
	ID      string
	Aliases []string
	// Rerank says the model is a reranker: it serves /v1/rerank and /rerank, and
	// /v1/embeddings, /embed and /tokenize refuse it (and the other way round).
	Rerank bool
	// Embedder and Reranker run its requests; a nil Reranker answers the rerank
	// routes 404.
	Embedder Embedder
	Reranker Reranker
}

// taskName is what m does, as /v1/models and /info name it: "rerank" or "embedding".
// A single model given by Config rather than Models is a reranker when it has a
// Reranker and no Embedder.
func (s *Server) taskName(m *Model) string {
	if m.Rerank || len(s.Models) == 0 && m.Reranker != nil && m.Embedder == nil {
		return "rerank"
	}
	return "embedding"
}

// names lists the model's id and aliases, the id first.
func (m *Model) names() []string { return append([]string{m.ID}, m.Aliases...) }

// task is what a route asks of a model.
type task int

const (
	taskAny task = iota
	taskEmbed
	taskRerank
)

// registry returns the served models: Server.Models, or, when that is empty, the
// single model of Config.ModelName, Config.Aliases, Embedder and Reranker.
func (s *Server) registry() []Model {
	if len(s.Models) > 0 {
		return s.Models
	}
	return []Model{{ID: s.Config.ModelName, Aliases: s.Config.Aliases, Embedder: s.Embedder, Reranker: s.Reranker}}
}

// lookup returns the model that name (without an input-type suffix) is the id or an
// alias of, or nil.
func (s *Server) lookup(name string) *Model {
	models := s.registry()
	for i := range models {
		for _, n := range models[i].names() {
			if n == name {
				return &models[i]
			}
		}
	}
	return nil
}

// knownModel says whether name (without a :query/:document suffix) is served here.
func (s *Server) knownModel(name string) bool { return s.lookup(name) != nil }

// pick resolves a request's model name (its input-type suffix already split off;
// asked is the name as sent, for messages) for a route doing t. No name picks the first model doing t (the first model when none
// does): the native routes (/embed, /tokenize, /rerank) have no model field, and
// a client without one expects the default model of the endpoint it calls. A name
// that is no model's is refused with OpenAI's 404 model_not_found when the server
// has several models or --strict-model is on; a single model otherwise takes any
// name, since clients such as LangChain send their own default
// (text-embedding-ada-002). With several models, naming a model of the other task
// is a 400 that says which endpoint serves it.
func (s *Server) pick(name, asked string, t task) (*Model, error) {
	models := s.registry()
	if name == "" {
		for i := range models {
			if t == taskAny || models[i].Rerank == (t == taskRerank) {
				return &models[i], nil
			}
		}
		return &models[0], nil
	}
	m := s.lookup(name)
	if m == nil {
		if len(models) > 1 || s.Config.StrictModel {
			return nil, modelNotFound(asked)
		}
		m = &models[0]
	}
	if len(models) > 1 && t != taskAny && m.Rerank != (t == taskRerank) {
		if m.Rerank {
			return nil, &statusError{status: http.StatusBadRequest, param: "model", code: routing.CodeWrongTask,
				msg: "The model `" + asked + "` is a reranker, which does not make embeddings; send query-document pairs to POST /v1/rerank, or name an embedding model (GET /v1/models lists them)."}
		}
		return nil, &statusError{status: http.StatusBadRequest, param: "model", code: routing.CodeWrongTask,
			msg: "The model `" + asked + "` is an embedding model, which does not rerank; name a reranker (GET /v1/models lists them), or compare embeddings."}
	}
	return m, nil
}

// modelNotFound is OpenAI's answer to an unknown model, word for word.
func modelNotFound(name string) error {
	return &statusError{status: http.StatusNotFound, param: "model", code: "model_not_found",
		msg: "The model `" + name + "` does not exist or you do not have access to it."}
}

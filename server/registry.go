package server

import (
	"net/http"

	"github.com/embed-stack/embed-stack/openai"
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
	// Meta describes it in GET /v1/models.
	Meta openai.ModelMeta
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
	return []Model{{ID: s.Config.ModelName, Aliases: s.Config.Aliases, Embedder: s.Embedder, Reranker: s.Reranker, Meta: s.Config.ModelMeta}}
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

// modelNotFound is OpenAI's answer to an unknown model, word for word.
func modelNotFound(name string) error {
	return &statusError{status: http.StatusNotFound, param: "model", code: "model_not_found",
		msg: "The model `" + name + "` does not exist or you do not have access to it."}
}

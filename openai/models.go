package openai

// Model is one entry of GET /v1/models: OpenAI's four fields, plus what a client of a
// server with several kinds of model needs to tell them apart.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Root is the id of the model that answers to ID: ID itself, the model an alias
	// names, or, where one model takes any name, that model (as vLLM's root field).
	Root string `json:"root"`
	// Task is what the model does: "embedding" or "rerank".
	Task string `json:"task"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// NewModel fills the constant fields of a model entry named id, answered by the model
// root, which does task.
func NewModel(id, root, task string, created int64) Model {
	return Model{ID: id, Object: "model", Created: created, OwnedBy: "embed-stack", Root: root, Task: task}
}

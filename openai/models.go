package openai

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// NewModel fills the constant fields of a model entry.
func NewModel(id string, created int64) Model {
	return Model{ID: id, Object: "model", Created: created, OwnedBy: "embed-stack"}
}

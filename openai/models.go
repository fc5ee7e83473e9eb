package openai

// Model is one entry of GET /v1/models: OpenAI's four fields, what a client of a
// server with several kinds of model needs to tell them apart, and embed-stack's
// description of the model (ModelMeta; clients ignore fields they do not know, as
// they do vLLM's max_model_len).
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
	ModelMeta
}

// ModelMeta describes a served model: its architecture and pooling, its native
// dimensions, context and tokenizer. Empty fields are left out.
type ModelMeta struct {
	// Architecture is the GGUF's general.architecture: "qwen3", "bert".
	Architecture string `json:"architecture,omitempty"`
	// Pooling is how a vector is made of the token states: "mean", "cls", "last".
	Pooling string `json:"pooling,omitempty"`
	// Dimensions is the native embedding size.
	Dimensions int `json:"dimensions,omitempty"`
	// ContextLength is the model's context (its training context) in tokens.
	ContextLength int `json:"context_length,omitempty"`
	// Tokenizer is the tokenizer algorithm: "BPE", "WordPiece", "Unigram".
	Tokenizer string `json:"tokenizer,omitempty"`
	// Weights is the weight type the model computes with ("F16", "BF16"), and
	// WeightsConvertedFrom the file's where the server converted it at load.
	Weights              string `json:"weights,omitempty"`
	WeightsConvertedFrom string `json:"weights_converted_from,omitempty"`
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

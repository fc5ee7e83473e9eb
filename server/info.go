package server

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/internal/buildinfo"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/teiapi"
)

// ModelInfo describes one served model in GET /info. A list, so that a server with
// several models (issue 17) reports each with its own limits.
type ModelInfo struct {
	// ID is the name /v1/models lists first; Aliases are the other accepted names.
	ID      string
	Aliases []string
	// Task is what the model serves: "embedding" or "rerank".
	Task string
	// Pooling is how a sequence becomes one vector: "last" (token) for Qwen3,
	// "mean" or "cls" for most encoders; for an embedding model only.
	Pooling string
	// Reranker describes a reranker's scoring; nil for an embedding model.
	Reranker *RerankerInfo
	// ContextLength is the model's context in tokens (its training context, or
	// what it takes where the GGUF gives none); max_input_tokens is what requests
	// may send.
	ContextLength int
	// Tokenizer is the tokenizer algorithm ("BPE", "WordPiece", "Unigram"), and
	// SpecialTokens the tokens every input is framed in ("[CLS] and [SEP]").
	Tokenizer     string
	SpecialTokens string
	// Prompts are an embedding model's query and document prompts.
	Prompts *Prompts
	// Weights is the type of the weights the workers compute with ("F16",
	// "BF16", "Q8_0"), and WeightsFrom the file's type where the server converted
	// them at load (--weights), else "".
	Weights, WeightsFrom string
	routing.Limits
	// File describes the GGUF: GET /info's source, file, size, quantization,
	// architecture and sha256, the Ollama probes (GET /api/tags, POST /api/show)
	// and TEI's /info keys; zero values where unknown.
	File ModelFile
}

// ModelFile is what GET /info and the Ollama and TEI APIs report about a model's file.
type ModelFile struct {
	// Source is --model as given: a Hugging Face reference or a path. Name is the
	// GGUF's file name.
	Source string
	Name   string
	// Size is the file's size in bytes, Modified its modification time.
	Size     int64
	Modified time.Time
	// Digest returns the file's sha256 in hex ("" while unknown): /api/tags's
	// digest. A function because a large file's hash may still be computing.
	Digest func() string
	// Architecture is general.architecture ("qwen3"), FileType the weight type
	// ("F16", "Q8_0"), Parameters the parameter count, ContextLength the
	// training context.
	Architecture  string
	FileType      string
	Parameters    int64
	ContextLength int
}

// RerankerInfo is what GET /info says of a reranker instead of an embedding's
// dimensions, pooling and output types, which mean nothing for one.
type RerankerInfo struct {
	// Head is where the two logits come from: "classifier" (the GGUF's two-row
	// cls.output.weight, as llama.cpp converts Qwen3-Reranker) or "lm_head_rows"
	// (the rows of yes and no of the full LM head, --task rerank); for a
	// cross-encoder "classifier" (its one-output cls.output.weight).
	Head string `json:"head"`
	// Labels name the two logits, in order; a cross-encoder's one output.
	Labels []string `json:"labels"`
	// Score says how relevance_score is computed from them.
	Score string `json:"score"`
}

// modelBody is one model of GET /info's answer: what every model has, then an
// embedding model's dimensions, pooling and output types, or a reranker's scoring.
type modelBody struct {
	ID           string   `json:"id"`
	Aliases      []string `json:"aliases"`
	Task         string   `json:"task"`
	Source       string   `json:"source"`
	File         string   `json:"file"`
	SizeBytes    int64    `json:"size_bytes"`
	Quantization string   `json:"quantization"`
	Architecture string   `json:"architecture"`
	// SHA256 is null until known.
	SHA256 *string `json:"sha256"`
	// Weights is the weight type in use: quantization's, or BF16 converted at
	// load from WeightsConvertedFrom.
	Weights              string `json:"weights"`
	WeightsConvertedFrom string `json:"weights_converted_from,omitempty"`
	ContextLength        int    `json:"context_length"`
	Tokenizer            string `json:"tokenizer"`
	SpecialTokens        string `json:"special_tokens"`

	Pooling       string   `json:"pooling,omitempty"`
	Prompts       *Prompts `json:"prompts,omitempty"`
	OutputTypes   []string `json:"output_types,omitempty"`
	Dimensions    *int     `json:"dimensions,omitempty"`
	MinDimensions *int     `json:"min_dimensions,omitempty"`

	Reranker *RerankerInfo `json:"reranker,omitempty"`

	MaxInputs           int `json:"max_inputs"`
	MaxTotalTokens      int `json:"max_total_tokens"`
	MaxInputTokens      int `json:"max_input_tokens"`
	MaxInstructionBytes int `json:"max_instruction_bytes"`
}

func (m ModelInfo) body() modelBody {
	f := m.File
	b := modelBody{
		ID: m.ID, Aliases: m.Aliases, Task: m.Task, Source: f.Source, File: f.Name, SizeBytes: f.Size,
		Quantization: f.FileType, Architecture: f.Architecture, Weights: m.Weights, WeightsConvertedFrom: m.WeightsFrom,
		ContextLength: m.ContextLength, Tokenizer: m.Tokenizer, SpecialTokens: m.SpecialTokens,
		MaxInputs: m.MaxInputs, MaxTotalTokens: m.MaxTotalTokens, MaxInputTokens: m.MaxInputTokens,
		MaxInstructionBytes: m.MaxInstructionBytes,
	}
	if b.Aliases == nil {
		b.Aliases = []string{}
	}
	if f.Digest != nil {
		if h := f.Digest(); h != "" {
			b.SHA256 = &h
		}
	}
	if m.Task == "rerank" {
		b.Reranker = m.Reranker
		return b
	}
	dims, minDims := m.Dim, m.MinDimensions
	b.Pooling, b.Prompts, b.OutputTypes, b.Dimensions, b.MinDimensions = m.Pooling, m.Prompts, outputTypes, &dims, &minDims
	return b
}

// Prompts are a model's prompt convention as GET /info shows it: the text before
// a query ({instruction} where the instruction goes) and a document, and the
// default instruction.
type Prompts struct {
	Family      string `json:"family"`
	Query       string `json:"query"`
	Document    string `json:"document"`
	Instruction string `json:"instruction"`
}

// Info is the body of GET /info, besides what the server adds itself (its own
// limits and the build). The embed-stack command fills it.
type Info struct {
	Models []ModelInfo `json:"models"`
	// Device is where the workers compute: "cpu", "cuda:N" or "metal".
	Device string `json:"device"`
}

// infoBody is GET /info's answer: embed-stack's keys, TEI's beside them (of the
// first embedding model; none without one), and the build.
type infoBody struct {
	Models     []modelBody  `json:"models"`
	Device     string       `json:"device"`
	CPUVariant string       `json:"cpu_variant,omitempty"`
	Limits     serverLimits `json:"limits"`
	*teiInfo
	buildinfo.Info
}

// teiInfo names teiapi.Info apart from buildinfo.Info, so both embed in infoBody.
type teiInfo = teiapi.Info

// serverLimits are the HTTP-edge limits (per-model limits are in ModelInfo).
type serverLimits struct {
	MaxBodyBytes          int64   `json:"max_body_bytes"`
	MaxConcurrentRequests int     `json:"max_concurrent_requests"`
	RequestTimeoutSeconds float64 `json:"request_timeout_seconds"`
}

// info serves GET /info: each model with where its file came from and what it
// holds, its task and limits, the device, and the build (version stamped by `make
// build`, the same as `embed-stack --version` and the build_info metric).
func (s *Server) info(c *gin.Context) {
	models := make([]modelBody, len(s.Info.Models))
	for i, m := range s.Info.Models {
		models[i] = m.body()
	}
	var cpuVariant string
	if s.CPUVariant != nil {
		cpuVariant = s.CPUVariant()
	}
	c.JSON(http.StatusOK, infoBody{
		Models:     models,
		Device:     s.Info.Device,
		CPUVariant: cpuVariant,
		Limits: serverLimits{
			MaxBodyBytes:          s.Config.MaxBodyBytes,
			MaxConcurrentRequests: s.Config.MaxConcurrentRequests,
			RequestTimeoutSeconds: s.Config.RequestTimeout.Seconds(),
		},
		Info: buildinfo.Get(),
		// TEI's sha and docker_label are its build's; ours are commit and none.
		teiInfo: s.teiInfo(),
	})
}

// outputTypes are the encoding_format values /v1/embeddings accepts for an
// embedding model.
var outputTypes = []string{"float", "base64", "int8", "uint8", "binary", "ubinary"}

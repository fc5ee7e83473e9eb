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
	ID      string   `json:"id"`
	Aliases []string `json:"aliases"`
	// Task is what the model serves: "embedding" or "rerank".
	Task string `json:"task"`
	// Pooling is how a sequence becomes one vector: "last" (token) for Qwen3.
	Pooling string `json:"pooling"`
	// OutputTypes are the accepted encoding_format values; the server fills them.
	OutputTypes []string `json:"output_types"`
	routing.Limits
	// File describes the GGUF, for the Ollama probes (GET /api/tags, POST
	// /api/show) and TEI's /info keys; zero values where unknown.
	File ModelFile `json:"-"`
}

// ModelFile is what the Ollama and TEI APIs report about a model's file.
type ModelFile struct {
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
	Models []ModelInfo  `json:"models"`
	Device string       `json:"device"`
	Limits serverLimits `json:"limits"`
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

// info serves GET /info: the models with their dimensions and limits, the device,
// and the build (version stamped by `make build`, commit from the Go toolchain's
// VCS stamp, the same as `embed-stack --version` and the build_info metric).
func (s *Server) info(c *gin.Context) {
	models := make([]ModelInfo, len(s.Info.Models))
	for i, m := range s.Info.Models {
		if m.Aliases == nil {
			m.Aliases = []string{}
		}
		if m.Task == "embedding" {
			m.OutputTypes = outputTypes
		} else if m.OutputTypes == nil {
			m.OutputTypes = []string{}
		}
		models[i] = m
	}
	c.JSON(http.StatusOK, infoBody{
		Models: models,
		Device: s.Info.Device,
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

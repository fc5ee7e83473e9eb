package server

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/ollamaapi"
	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
)

// The Ollama routes (ollamaapi): thin handlers over the same Embedder call as
// /v1/embeddings. Their errors are in Ollama's shape (dialectOf: the /api/ prefix).

// ollamaModel resolves an Ollama model name for t: ":latest", the tag Ollama adds
// to a bare name, is dropped (GET /api/tags lists "id:latest"), and the
// ":query"/":document" suffix makes the inputs queries or documents, as on
// /v1/embeddings. An unknown name (with several models or --strict-model) is
// Ollama's 404.
func (s *Server) ollamaModel(name string, t task) (m *Model, inputType string, err error) {
	if name == "" {
		return nil, "", ollamaapi.ErrModelRequired
	}
	m, suffixType, err := s.resolve(strings.TrimSuffix(name, ":latest"), t)
	if isNotFound(err) {
		return nil, "", &statusError{status: http.StatusNotFound, code: "model_not_found", msg: "model '" + name + "' not found"}
	}
	return m, suffixType, err
}

// isNotFound says err is resolve's unknown-model refusal.
func isNotFound(err error) bool {
	se, ok := err.(*statusError)
	return ok && se.code == "model_not_found"
}

// ollamaEmbed serves POST /api/embed: {"model","input","truncate","dimensions",...}
// → {"model","embeddings","total_duration","load_duration","prompt_eval_count"}.
// The vectors are /v1/embeddings' for the same texts, unit length as Ollama's;
// truncate defaults to true as in Ollama.
func (s *Server) ollamaEmbed(c *gin.Context) {
	start := time.Now()
	body, err := s.readBody(c)
	if err != nil {
		writeError(c, err)
		return
	}
	req, err := ollamaapi.DecodeEmbed(body)
	if err == nil {
		err = openai.CheckUTF8(body, "input", func(i int) string { return fmt.Sprintf("input %d", i) })
	}
	if err != nil {
		writeError(c, err)
		return
	}
	m, inputType, err := s.ollamaModel(req.Model, taskEmbed)
	if err != nil {
		writeError(c, err)
		return
	}
	ctx := useModel(c, m)
	loaded := time.Now()
	c.Set(ctxInputs, len(req.Texts))
	resp := ollamaapi.EmbedResponse{Model: req.Model, Embeddings: [][]float32{}}
	if len(req.Texts) > 0 {
		rreq := &routing.Request{
			Texts:      req.Texts,
			InputType:  firstNonEmpty(c.GetHeader(headerInputType), inputType),
			Dimensions: s.ollamaDimensions(m, req.Dimensions),
		}
		if req.Truncate {
			rreq.Truncate = routing.TruncateEnd
		}
		res, err := m.Embedder.Embed(ctx, rreq)
		if err != nil {
			writeError(c, err)
			return
		}
		c.Set(ctxTokens, res.Tokens)
		resp.Embeddings, resp.PromptEvalCount = res.Vectors, res.Tokens
		resp.LoadDuration, resp.TotalDuration = loaded.Sub(start), time.Since(start)
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", resp.AppendJSON(make([]byte, 0, responseSizeHint(resp.Embeddings, false))))
}

// ollamaDimensions is the dimensions routing gets for Ollama's: Ollama cuts a
// vector only when 0 < dimensions < its size and ignores any other value.
func (s *Server) ollamaDimensions(m *Model, d int) int {
	if info := s.modelInfo(m.ID); d <= 0 || info != nil && d >= info.Dim {
		return 0
	}
	return d
}

// ollamaEmbeddings serves the legacy POST /api/embeddings: {"model","prompt"} →
// {"embedding":[...]}, the same unit vector as /api/embed (Ollama's Qwen3 model
// normalises its output on this route too). An empty prompt answers an empty
// vector, as Ollama's does (clients use it to load a model). As in Ollama, a
// prompt over the context is not truncated; it is refused 400 (Ollama answers
// every runner error of this route 500).
func (s *Server) ollamaEmbeddings(c *gin.Context) {
	body, err := s.readBody(c)
	if err != nil {
		writeError(c, err)
		return
	}
	req, err := ollamaapi.DecodeEmbedding(body)
	if err == nil {
		err = openai.CheckUTF8(body, "prompt", func(int) string { return "'prompt'" })
	}
	if err != nil {
		writeError(c, err)
		return
	}
	m, inputType, err := s.ollamaModel(req.Model, taskEmbed)
	if isNotFound(err) {
		err = &statusError{status: http.StatusNotFound, code: "model_not_found", msg: "model \"" + req.Model + "\" not found, try pulling it first"}
	}
	if err != nil {
		writeError(c, err)
		return
	}
	ctx := useModel(c, m)
	if req.Prompt == "" {
		c.Data(http.StatusOK, "application/json; charset=utf-8", []byte(`{"embedding":[]}`))
		return
	}
	c.Set(ctxInputs, 1)
	res, err := m.Embedder.Embed(ctx, &routing.Request{Texts: []string{req.Prompt}, InputType: firstNonEmpty(c.GetHeader(headerInputType), inputType), InputField: "prompt"})
	if err != nil {
		writeError(c, err)
		return
	}
	c.Set(ctxTokens, res.Tokens)
	c.Data(http.StatusOK, "application/json; charset=utf-8", ollamaapi.AppendEmbedding(make([]byte, 0, responseSizeHint(res.Vectors, false)), res.Vectors[0]))
}

// ollamaTags serves GET /api/tags: every name of every model, as Ollama lists its
// models ("name:latest" for a name without a tag, which is how clients that
// check a model exists look for it), and an embedding model's names with the
// input-type tags ollamaModel takes.
func (s *Server) ollamaTags(c *gin.Context) {
	out := ollamaapi.ListResponse{Models: []ollamaapi.ListModel{}}
	for _, m := range s.registry() {
		info := s.modelInfo(m.ID)
		var names []string
		for _, n := range m.names() {
			names = append(names, n)
			if !m.Rerank {
				// The :query and :document tags too: clients that check a model
				// exists before using it (LangChain's validate_model_on_init) look
				// for the name they were given in this list.
				names = append(names, n+":query", n+":document")
			}
		}
		for _, n := range names {
			n = ollamaName(n)
			lm := ollamaapi.ListModel{Name: n, Model: n, ModifiedAt: s.Config.Created.UTC(), Details: ollamaDetails(info)}
			if info != nil {
				lm.Size = info.File.Size
				if !info.File.Modified.IsZero() {
					lm.ModifiedAt = info.File.Modified.UTC()
				}
				if info.File.Digest != nil {
					lm.Digest = info.File.Digest()
				}
			}
			out.Models = append(out.Models, lm)
		}
	}
	c.JSON(http.StatusOK, out)
}

// ollamaShow serves POST /api/show: the model's details, its GGUF facts under
// Ollama's model_info keys, and its capability ("embedding"; a reranker has
// none Ollama names).
func (s *Server) ollamaShow(c *gin.Context) {
	body, err := s.readBody(c)
	if err != nil {
		writeError(c, err)
		return
	}
	name, err := ollamaapi.DecodeShow(body)
	if err != nil {
		writeError(c, err)
		return
	}
	m, _, err := s.ollamaModel(name, taskAny)
	if err != nil {
		writeError(c, err)
		return
	}
	info := s.modelInfo(m.ID)
	resp := ollamaapi.ShowResponse{Details: ollamaDetails(info), ModelInfo: map[string]any{}, Capabilities: []string{}, ModifiedAt: s.Config.Created.UTC()}
	if !m.Rerank {
		resp.Capabilities = append(resp.Capabilities, "embedding")
	}
	if info != nil {
		f := info.File
		if !f.Modified.IsZero() {
			resp.ModifiedAt = f.Modified.UTC()
		}
		if f.Architecture != "" {
			resp.ModelInfo["general.architecture"] = f.Architecture
			resp.ModelInfo[f.Architecture+".embedding_length"] = info.Dim
			if f.ContextLength > 0 {
				resp.ModelInfo[f.Architecture+".context_length"] = f.ContextLength
			}
			if p, ok := ollamaPooling(info); ok {
				resp.ModelInfo[f.Architecture+".pooling_type"] = p
			}
		}
		if f.Parameters > 0 {
			resp.ModelInfo["general.parameter_count"] = f.Parameters
		}
	}
	c.JSON(http.StatusOK, resp)
}

// ollamaName is a model name as Ollama lists it: with ":latest" when it has no tag.
func ollamaName(n string) string {
	if !strings.Contains(n, ":") {
		return n + ":latest"
	}
	return n
}

// ollamaPooling is the model's pooling as llama.cpp numbers it in a GGUF's
// pooling_type, which /api/show's model_info carries: a reranker's is rank (4).
func ollamaPooling(info *ModelInfo) (gguf.Pooling, bool) {
	if info.Task == "rerank" {
		return gguf.PoolingRank, true
	}
	p, err := gguf.ParsePooling(info.Pooling)
	return p, err == nil && p > gguf.PoolingNone
}

// ollamaDetails is a model's "details" in Ollama's shape.
func ollamaDetails(info *ModelInfo) ollamaapi.ModelDetails {
	d := ollamaapi.ModelDetails{Format: "gguf", Families: []string{}}
	if info == nil {
		return d
	}
	f := info.File
	d.Family, d.QuantizationLevel = f.Architecture, f.FileType
	if f.Architecture != "" {
		d.Families = []string{f.Architecture}
	}
	if f.Parameters > 0 {
		d.ParameterSize = humanCount(f.Parameters)
	}
	return d
}

// humanCount writes a parameter count as Ollama's details do: "596.05M",
// "7.6B", "8B", "137K".
func humanCount(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return trimmed(f/1e9, 1) + "B"
	case f >= 1e6:
		return trimmed(f/1e6, 2) + "M"
	case f >= 1e3:
		return strconv.FormatFloat(f/1e3, 'f', 0, 64) + "K"
	}
	return strconv.FormatInt(n, 10)
}

// trimmed writes v with no decimals when it is whole, else with prec.
func trimmed(v float64, prec int) string {
	if v == math.Floor(v) {
		prec = 0
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// ollamaVersion serves GET /api/version.
func (s *Server) ollamaVersion(c *gin.Context) {
	c.JSON(http.StatusOK, ollamaapi.VersionResponse{Version: ollamaapi.Version})
}

// modelInfo is GET /info's entry for the model with this id, or nil.
func (s *Server) modelInfo(id string) *ModelInfo {
	for i := range s.Info.Models {
		if s.Info.Models[i].ID == id {
			return &s.Info.Models[i]
		}
	}
	return nil
}

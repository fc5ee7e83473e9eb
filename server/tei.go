package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/teiapi"
)

// embed serves POST /embed in two shapes, told apart by the field the body holds:
// TEI's ("inputs") and the seed system's native one ("texts"). A body with both is
// refused: which one the caller meant is a guess.
func (s *Server) embed(c *gin.Context) {
	body, err := s.readBody(c)
	if err != nil {
		writeError(c, err)
		return
	}
	if !teiapi.IsEmbedRequest(body) {
		s.nativeEmbed(c)
		return
	}
	c.Set(ctxDialect, dialectTEI)
	var fields map[string]any
	if openai.CheckUTF8(body, "inputs", teiItem) == nil && json.Unmarshal(body, &fields) == nil && fields["texts"] != nil {
		writeError(c, &teiapi.ValidationError{Type: teiapi.TypeValidation,
			Message: "Input validation error: send `inputs` (text-embeddings-inference's shape) or `texts` (the native one), not both"})
		return
	}
	s.teiEmbed(c)
}

func teiItem(i int) string { return "inputs[" + strconv.Itoa(i) + "]" }

// teiRoot serves POST /, where TEI answers what its model does: a body with a
// "query" and "texts" is a rerank (as a reranker's TEI serves it there), any other
// TEI's embed.
func (s *Server) teiRoot(c *gin.Context) {
	body, err := s.readBody(c)
	if err != nil {
		c.Set(ctxDialect, dialectTEI)
		writeError(c, err)
		return
	}
	if has := bodyHas(body, "query", "texts"); has[0] && has[1] {
		s.teiRerank(c)
		return
	}
	s.teiEmbed(c)
}

// bodyHas says which of names the JSON object body holds as top-level keys (none,
// for a body that is not an object): the routes that take two shapes tell them
// apart by a key, and leave the refusal of a bad body to the shape's decoder.
func bodyHas(body []byte, names ...string) []bool {
	out := make([]bool, len(names))
	var keys map[string]json.RawMessage
	if json.Unmarshal(body, &keys) == nil {
		for i, n := range names {
			_, out[i] = keys[n]
		}
	}
	return out
}

// teiEmbed serves TEI's embed: POST /embed with "inputs", and POST /, where TEI
// serves the same for an embedding model (huggingface_hub's InferenceClient posts
// to the base URL). The answer is a JSON array of vectors; "normalize": false
// returns them as the model pooled them (cut to "dimensions"), "prompt_name"
// "query" makes the inputs queries (Qwen3-Embedding's sentence-transformers
// prompts), "truncate" with "truncation_direction" cuts long inputs, and "model"
// (not TEI's: it serves one model) picks one of several as on /v1/embeddings.
// Errors are TEI's {"error","error_type"} with its statuses (dialectError).
func (s *Server) teiEmbed(c *gin.Context) {
	c.Set(ctxDialect, dialectTEI)
	body, err := s.readBody(c)
	if err != nil {
		writeError(c, err)
		return
	}
	req, err := teiapi.DecodeEmbed(body)
	if err == nil {
		err = openai.CheckUTF8(body, "inputs", teiItem)
	}
	if err != nil {
		writeError(c, err)
		return
	}
	m, suffixType, err := s.resolve(req.Model, taskEmbed)
	if err != nil {
		writeError(c, err)
		return
	}
	rreq := &routing.Request{
		Texts:      req.Inputs,
		InputType:  firstNonEmpty(req.PromptName, c.GetHeader(headerInputType), suffixType),
		Dimensions: req.Dimensions,
		Raw:        !req.Normalize,
		InputField: "inputs",
	}
	if info := s.modelInfo(m.ID); info != nil && req.Dimensions > info.Dim {
		writeError(c, &teiapi.ValidationError{Type: teiapi.TypeValidation, Message: "Input validation error: `dimensions` should be smaller than the maximum embedding dimension."})
		return
	}
	if req.Truncate != nil && *req.Truncate {
		rreq.Truncate = routing.TruncateEnd
		if req.TruncateLeft {
			rreq.Truncate = routing.TruncateStart
		}
	}
	c.Set(ctxInputs, len(req.Inputs))
	res, err := m.Embedder.Embed(useModel(c, m), rreq)
	if err != nil {
		writeError(c, err)
		return
	}
	c.Set(ctxTokens, res.Tokens)
	c.Header("X-Compute-Tokens", strconv.Itoa(res.Tokens))
	c.Data(http.StatusOK, "application/json", teiapi.AppendEmbeddings(make([]byte, 0, responseSizeHint(res.Vectors, false)), res.Vectors, openai.AppendFloats))
}

// errNoEmbedAll is POST /embed_all's answer. TEI returns every token's final
// hidden state there; embed-stack's engine marks as outputs only the tokens the
// pooling reads (a Qwen3 sequence's last), and for a causal decoder llama.cpp
// runs the vocabulary-wide LM head on every output row and reserves its logits
// (151669 floats, 607 KB, per row), so every token's state would cost a Qwen3
// model about a third more compute per token and hundreds of MB per decode call,
// besides a per-token result through the worker protocol and the router
// (docs/api.md, "TEI's API"). TEI answers what a model cannot do 424 Backend.
var errNoEmbedAll = &statusError{status: http.StatusFailedDependency, code: "embed_all_not_available",
	msg: "`embed_all` is not available: embed-stack computes the pooled vector of each input, not every token's; use /embed"}

// teiEmbedAll serves POST /embed_all: TEI's per-token embeddings, refused in
// TEI's error shape (errNoEmbedAll; dialectOf gives the path TEI's shape, a 401
// included) whatever the body.
func (s *Server) teiEmbedAll(c *gin.Context) {
	writeError(c, errNoEmbedAll)
}

// teiInfo is TEI's GET /info keys for the first embedding model, which /info
// carries beside its own (TEI serves one model).
func (s *Server) teiInfo() *teiapi.Info {
	var m *ModelInfo
	for i := range s.Info.Models {
		if s.Info.Models[i].Task == "embedding" {
			m = &s.Info.Models[i]
			break
		}
	}
	if m == nil {
		return nil
	}
	info := &teiapi.Info{
		ModelID:               m.ID,
		ModelDtype:            teiDtype(m.File.FileType),
		ModelType:             teiapi.ModelType{Embedding: &teiapi.EmbeddingModel{Pooling: teiapi.PoolingName(m.Pooling)}},
		MaxConcurrentRequests: s.Config.MaxConcurrentRequests,
		MaxInputLength:        m.MaxInputTokens,
		MaxBatchTokens:        m.MaxTotalTokens,
		MaxClientBatchSize:    m.MaxInputs,
		TokenizationWorkers:   1,
	}
	if m.File.Digest != nil {
		if d := m.File.Digest(); d != "" {
			info.ModelSHA = &d
		}
	}
	return info
}

// teiDtype names a GGUF weight type as TEI's model_dtype does ("float16",
// "float32", "bfloat16"); a quantized type keeps its GGUF name ("q8_0").
func teiDtype(fileType string) string {
	switch fileType {
	case "F16":
		return "float16"
	case "F32":
		return "float32"
	case "BF16":
		return "bfloat16"
	case "":
		return "unknown"
	}
	return strings.ToLower(fileType)
}

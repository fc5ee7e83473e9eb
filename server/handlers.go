package server

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/teiapi"
)

// embeddings serves POST /v1/embeddings.
func (s *Server) embeddings(c *gin.Context) {
	req, err := s.decodeEmbeddingRequest(c)
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
		Texts:       req.Input.Texts,
		TokenIDs:    req.Input.Tokens,
		InputType:   firstNonEmpty(req.InputType, c.GetHeader(headerInputType), suffixType),
		Instruction: req.Instruction,
		Dimensions:  req.Dimensions,
		Truncate:    truncation(req.Truncate),
	}
	if rreq.Instruction == nil {
		if rreq.Instruction, err = instructionHeader(c); err != nil {
			writeError(c, err)
			return
		}
	}
	c.Set(ctxInputs, req.Input.Len())
	ctx := useModel(c, m)
	res, err := m.Embedder.Embed(ctx, rreq)
	if err != nil {
		writeError(c, err)
		return
	}
	c.Set(ctxTokens, res.Tokens)
	model := req.Model
	if model == "" {
		model = m.ID
	}
	resp := openai.EmbeddingResponse{Model: model, Vectors: res.Vectors, Base64: req.Base64, PromptTokens: res.Tokens, Cached: res.Cached, CachedTokens: res.CachedTokens}
	quantizeResponse(&resp, req.OutputType)
	writeEmbeddings(ctx, c, &resp)
}

// responseSizeHint sizes the output buffer once: about 12 bytes per float as text,
// 5.34 as base64.
func responseSizeHint(v [][]float32, b64 bool) int {
	per := 12
	if b64 {
		per = 6
	}
	n := 256
	for _, x := range v {
		n += 64 + per*len(x)
	}
	return n
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// models lists every served model's id and aliases, in the order they were given.
func (s *Server) models() []openai.Model {
	var ms []openai.Model
	for _, m := range s.registry() {
		for _, n := range m.names() {
			om := openai.NewModel(n, m.ID, s.taskName(&m), s.Config.Created.Unix())
			om.ModelMeta = m.Meta
			ms = append(ms, om)
		}
	}
	return ms
}

// listModels serves GET /v1/models.
func (s *Server) listModels(c *gin.Context) {
	c.JSON(http.StatusOK, openai.ModelList{Object: "list", Data: s.models()})
}

// getModel serves GET /v1/models/{model}. It accepts every name /v1/embeddings
// accepts (suffixed "m:query" forms, and any name at all where a single model is
// served without --strict-model), so that a client which checks its model with
// models.retrieve before embedding (the OpenAI SDKs) is not refused a model it
// could use; the answer carries the name as asked, as /v1/embeddings echoes it, and
// in root the id of the model that answers to it: a name no model has (one model,
// no --strict-model) is not made to look like a model loaded under that name.
func (s *Server) getModel(c *gin.Context) {
	name := c.Param("model")
	m, _, err := s.resolve(name, taskAny)
	if err != nil || name == "" {
		writeError(c, modelNotFound(name))
		return
	}
	om := openai.NewModel(name, m.ID, s.taskName(m), s.Config.Created.Unix())
	om.ModelMeta = m.Meta
	c.JSON(http.StatusOK, om)
}

// nativeRequest is the body of POST /embed and POST /tokenize, the seed system's
// native API. Text is POST /tokenize's single input; POST /embed refuses it.
type nativeRequest struct {
	// Model picks one of several served models, as /v1/embeddings' model does
	// (a :query or :document suffix included); absent, the first embedding model.
	Model       string   `json:"model"`
	Texts       []string `json:"texts"`
	Text        *string  `json:"text"`
	InputType   string   `json:"input_type"`
	Instruction *string  `json:"instruction"`
	Dimensions  int      `json:"dimensions"`
	// Truncate is true, false, "end" or "start" (openai.DecodeTruncate).
	Truncate json.RawMessage `json:"truncate"`
}

// exactNative redoes nr from body's exactly matching keys (openai.ExactFields):
// encoding/json matched them case-insensitively. The keys are nativeRequest's
// json tags.
func exactNative(body []byte, nr *nativeRequest) error {
	fields := map[string]*json.RawMessage{}
	typ := reflect.TypeFor[nativeRequest]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		fields[name] = new(json.RawMessage)
	}
	if err := openai.ExactFields(body, fields); err != nil {
		return err
	}
	exact := map[string]json.RawMessage{}
	for k, v := range fields {
		if *v != nil {
			exact[k] = *v
		}
	}
	canonical, err := json.Marshal(exact)
	if err != nil {
		return err
	}
	*nr = nativeRequest{}
	return json.Unmarshal(canonical, nr) // the values were valid in body, so they are here
}

// decodeNative reads a native request and picks its model; acceptText allows the
// single "text" of POST /tokenize.
func (s *Server) decodeNative(c *gin.Context, acceptText bool) (*routing.Request, *Model, bool) {
	body, err := s.readBody(c)
	if err != nil {
		writeError(c, err)
		return nil, nil, false
	}
	if acceptText && teiapi.IsEmbedRequest(body) {
		writeError(c, &statusError{status: http.StatusBadRequest, param: "inputs",
			msg: "POST /tokenize takes 'text' (one string) or 'texts' (an array of strings); 'inputs' is text-embeddings-inference's field, whose /tokenize answer (each token's text and character offsets) this server does not give."})
		return nil, nil, false
	}
	var nr nativeRequest
	if err := json.Unmarshal(body, &nr); err != nil {
		writeError(c, &openai.DecodeError{Message: "We could not parse the JSON body of your request: " + err.Error() + "."})
		return nil, nil, false
	}
	if err := exactNative(body, &nr); err != nil {
		writeError(c, err)
		return nil, nil, false
	}
	if err := openai.CheckUTF8(body, "texts", textsItem); err != nil {
		writeError(c, err)
		return nil, nil, false
	}
	if err := checkNativeText(nr, acceptText); err != nil {
		writeError(c, err)
		return nil, nil, false
	}
	req := &routing.Request{Texts: nr.Texts, InputType: nr.InputType, Instruction: nr.Instruction, Dimensions: nr.Dimensions, InputField: "texts"}
	if nr.Text != nil {
		req.Texts, req.InputField = []string{*nr.Text}, "text"
	}
	trunc, err := openai.DecodeTruncate(nr.Truncate)
	if err != nil {
		writeError(c, err)
		return nil, nil, false
	}
	req.Truncate = truncation(trunc)
	m, suffixType, err := s.resolve(nr.Model, taskEmbed)
	if err != nil {
		writeError(c, err)
		return nil, nil, false
	}
	req.InputType = firstNonEmpty(req.InputType, c.GetHeader(headerInputType), suffixType)
	if req.Instruction == nil {
		if req.Instruction, err = instructionHeader(c); err != nil {
			writeError(c, err)
			return nil, nil, false
		}
	}
	c.Set(ctxInputs, len(req.Texts))
	return req, m, true
}

// nativeEmbed serves POST /embed: {"texts":[...],"input_type":...,"instruction":...}
// → {"vectors":[[...]]}, normalised as /v1/embeddings returns them.
func (s *Server) nativeEmbed(c *gin.Context) {
	req, m, ok := s.decodeNative(c, false)
	if !ok {
		return
	}
	res, err := m.Embedder.Embed(useModel(c, m), req)
	if err != nil {
		writeError(c, err)
		return
	}
	c.Set(ctxTokens, res.Tokens)
	out := make([]byte, 0, responseSizeHint(res.Vectors, false))
	out = append(out, `{"vectors":[`...)
	for i, v := range res.Vectors {
		if i > 0 {
			out = append(out, ',')
		}
		out = openai.AppendFloats(out, v)
	}
	out = append(out, `]}`...)
	c.Data(http.StatusOK, "application/json", out)
}

// tokenizeResult is one input of POST /tokenize's answer: the ids the model would
// see (wrapping and EOS included) and their count, which is what usage reports.
type tokenizeResult struct {
	IDs   []int32 `json:"ids"`
	Count int     `json:"count"`
}

// tokenize serves POST /tokenize: {"text": "..."} or {"texts": [...]} with the
// same input_type/instruction fields as /embed.
func (s *Server) tokenize(c *gin.Context) {
	req, m, ok := s.decodeNative(c, true)
	if !ok {
		return
	}
	useModel(c, m)
	seqs, err := m.Embedder.Prepare(req)
	if err != nil {
		writeError(c, err)
		return
	}
	results := make([]tokenizeResult, len(seqs))
	total := 0
	for i, seq := range seqs {
		results[i] = tokenizeResult{IDs: seq, Count: len(seq)}
		total += len(seq)
	}
	c.Set(ctxTokens, total)
	if len(results) == 1 {
		c.JSON(http.StatusOK, gin.H{"ids": results[0].IDs, "count": results[0].Count, "total": total, "results": results})
		return
	}
	c.JSON(http.StatusOK, gin.H{"total": total, "results": results})
}

// instructionHeader is the X-Embedding-Instruction header (for clients that cannot
// add a body field), nil when absent: the body's "instruction" goes first. A
// header that is not UTF-8 is refused as the same bytes in the body are, rather
// than embedded with U+FFFD in their place.
func instructionHeader(c *gin.Context) (*string, error) {
	h := c.GetHeader(headerInstruction)
	if h == "" {
		return nil, nil
	}
	if !utf8.ValidString(h) {
		return nil, &statusError{status: http.StatusBadRequest, param: "instruction", code: "invalid_value",
			msg: "The " + headerInstruction + " header is not valid UTF-8; send the instruction in UTF-8 (in the header, or as the body's 'instruction')."}
	}
	return &h, nil
}

package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
)

// Reranker scores documents against a query; *routing.Router implements it.
type Reranker interface {
	Rerank(ctx context.Context, req *routing.RerankRequest) (*routing.RerankResult, error)
}

// rerank serves POST /v1/rerank in Cohere's and Jina's shape.
func (s *Server) rerank(c *gin.Context) {
	body, err := s.readBody(c)
	if err != nil {
		writeError(c, err)
		return
	}
	req, err := openai.DecodeRerankRequest(body)
	if err != nil {
		writeError(c, err)
		return
	}
	m, _, err := s.resolve(req.Model, taskRerank)
	if err != nil {
		writeError(c, err)
		return
	}
	res, ok := s.runRerank(c, m, &routing.RerankRequest{Query: req.Query, Documents: req.Documents, Instruction: req.Instruction})
	if !ok {
		return
	}
	model := req.Model
	if model == "" {
		model = m.ID
	}
	resp := openai.RerankResponse{ID: newID(), Model: model, Usage: openai.RerankUsage{PromptTokens: res.Tokens, TotalTokens: res.Tokens}}
	for _, i := range res.Ranked(req.TopN) {
		r := openai.RerankResult{Index: i, RelevanceScore: res.Scores[i]}
		if req.ReturnDocuments {
			r.Document = &openai.RerankDocument{Text: req.Documents[i]}
		}
		resp.Results = append(resp.Results, r)
	}
	c.JSON(http.StatusOK, resp)
}

// teiRerank serves POST /rerank in text-embeddings-inference's shape: a JSON array of
// {index, score, text?}, best first. A body with "documents" instead of "texts"
// is Cohere's and Jina's shape, which vLLM and Infinity serve on /rerank (and
// LiteLLM's providers for them post there): it is answered as /v1/rerank.
func (s *Server) teiRerank(c *gin.Context) {
	body, err := s.readBody(c)
	if err != nil {
		writeError(c, err)
		return
	}
	switch has := bodyHas(body, "texts", "documents"); {
	case has[0] && has[1]:
		writeError(c, &statusError{status: http.StatusBadRequest, param: "documents", code: "invalid_value",
			msg: "Send 'texts' (text-embeddings-inference's shape) or 'documents' (Cohere's and Jina's), not both."})
		return
	case has[1]:
		s.rerank(c)
		return
	}
	req, err := openai.DecodeTEIRerankRequest(body)
	if err != nil {
		writeError(c, err)
		return
	}
	m, _, err := s.resolve(req.Model, taskRerank)
	if err != nil {
		writeError(c, err)
		return
	}
	rreq := &routing.RerankRequest{Query: req.Query, Documents: req.Texts, Instruction: req.Instruction, DocumentsField: "texts"}
	if req.Truncate {
		rreq.Truncate = routing.TruncateEnd
		if req.TruncateLeft {
			rreq.Truncate = routing.TruncateStart
		}
	}
	res, ok := s.runRerank(c, m, rreq)
	if !ok {
		return
	}
	out := make([]openai.TEIRerankResult, 0, len(res.Scores))
	for _, i := range res.Ranked(0) {
		r := openai.TEIRerankResult{Index: i, Score: res.Scores[i]}
		if req.RawScores {
			r.Score = res.Logits[i]
		}
		if req.ReturnText {
			r.Text = &req.Texts[i]
		}
		out = append(out, r)
	}
	c.JSON(http.StatusOK, out)
}

// runRerank runs a decoded request on m, writing the error answer when it fails.
func (s *Server) runRerank(c *gin.Context, m *Model, req *routing.RerankRequest) (*routing.RerankResult, bool) {
	c.Set(ctxInputs, len(req.Documents))
	ctx := useModel(c, m)
	if m.Reranker == nil {
		writeError(c, &statusError{status: http.StatusNotFound, code: "not_found", msg: "This server does not rerank: " + c.Request.URL.Path + " needs a reranker model."})
		return nil, false
	}
	res, err := m.Reranker.Rerank(ctx, req)
	if err != nil {
		writeError(c, err)
		return nil, false
	}
	c.Set(ctxTokens, res.Tokens)
	return res, true
}

// newID returns a response id, as Cohere's rerank answers carry one.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

package openai

import (
	"encoding/json"
	"fmt"
)

// RerankRequest is the body of POST /v1/rerank in the shape Cohere's and Jina's
// clients send (and LangChain's and LlamaIndex's rerankers built on them), plus the
// embed-stack extension Instruction (Qwen3-Reranker's task). Unknown fields
// (Cohere's rank_fields, max_chunks_per_doc, max_tokens_per_doc) are ignored.
// Keys are matched exactly, as on /v1/embeddings (ExactFields): "Query" is an
// unknown field, and a key given twice is refused.
type RerankRequest struct {
	Model string
	Query string
	// Documents are the texts to score: the JSON strings, or the "text" of objects.
	Documents []string
	// TopN is how many results to return, best first; 0 (absent or null) = all.
	TopN int
	// ReturnDocuments puts each document's text in its result (default false, as
	// Cohere's API; Jina's defaults to true).
	ReturnDocuments bool
	Instruction     *string
}

// TEIRerankRequest is the body of POST /rerank in text-embeddings-inference's shape.
type TEIRerankRequest struct {
	Query string
	Texts []string
	// RawScores returns logit(yes) - logit(no) instead of its sigmoid.
	RawScores bool
	// ReturnText puts each text in its result.
	ReturnText  bool
	Instruction *string
	// Truncate shortens a text whose pair with the query is over the limit
	// instead of refusing it: TEI's "truncate", its end cut, or its beginning
	// where TruncateLeft ("truncation_direction": "Left").
	Truncate, TruncateLeft bool
	// Model names one of the served rerankers, as /v1/rerank's "model" does
	// (not TEI's field: it serves one model); "" is the first.
	Model string
}

// RerankResponse is the answer to POST /v1/rerank: results best first.
type RerankResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Results []RerankResult `json:"results"`
	Usage   RerankUsage    `json:"usage"`
}

// RerankResult is one scored document. Index is its position in the request.
type RerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore float64         `json:"relevance_score"`
	Document       *RerankDocument `json:"document,omitempty"`
}

// RerankDocument is a returned document, as Cohere and Jina nest it.
type RerankDocument struct {
	Text string `json:"text"`
}

// RerankUsage counts the tokens decoded: each document in the template with the
// query. Jina names the figure total_tokens; prompt_tokens repeats it as OpenAI's
// usage does for embeddings.
type RerankUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// TEIRerankResult is one element of POST /rerank's answer, a JSON array best first.
type TEIRerankResult struct {
	Index int     `json:"index"`
	Score float64 `json:"score"`
	Text  *string `json:"text,omitempty"`
}

type wireRerankRequest struct {
	Model           json.RawMessage `json:"model"`
	Query           json.RawMessage `json:"query"`
	Documents       json.RawMessage `json:"documents"`
	TopN            json.RawMessage `json:"top_n"`
	ReturnDocuments json.RawMessage `json:"return_documents"`
	Instruction     json.RawMessage `json:"instruction"`
}

// DecodeRerankRequest parses and type-checks a POST /v1/rerank body. Limits and
// meaning (an empty query, too many documents) are for routing.
func DecodeRerankRequest(body []byte) (*RerankRequest, error) {
	var w wireRerankRequest
	if err := decodeExact(body, &w); err != nil {
		return nil, err
	}
	if err := CheckUTF8(body, "documents", documentItem); err != nil {
		return nil, err
	}
	var req RerankRequest
	var err error
	if req.Model, err = decodeModel(w.Model); err != nil {
		return nil, err
	}
	if req.Query, err = reqString(w.Query, "query"); err != nil {
		return nil, err
	}
	if req.Instruction, err = optStringPtr(w.Instruction, "instruction"); err != nil {
		return nil, err
	}
	if req.ReturnDocuments, err = optBool(w.ReturnDocuments, "return_documents"); err != nil {
		return nil, err
	}
	if !isNull(w.TopN) {
		if err := json.Unmarshal(w.TopN, &req.TopN); err != nil || req.TopN < 1 {
			return nil, &DecodeError{Param: "top_n", Message: fmt.Sprintf("%s is not a positive integer - 'top_n'", compact(w.TopN))}
		}
	}
	if isNull(w.Documents) {
		return nil, &DecodeError{Param: "documents", Message: "'documents' is a required property."}
	}
	var docs []json.RawMessage
	if err := json.Unmarshal(w.Documents, &docs); err != nil {
		return nil, &DecodeError{Param: "documents", Message: fmt.Sprintf("%s is not of type 'array' - 'documents'", compact(w.Documents))}
	}
	req.Documents = make([]string, len(docs))
	for i, d := range docs {
		if req.Documents[i], err = decodeDocument(i, d); err != nil {
			return nil, err
		}
	}
	return &req, nil
}

// decodeDocument reads document i: a JSON string, or an object whose key "text"
// (exactly: "Text" is not it, as at the top level) holds one.
func decodeDocument(i int, d json.RawMessage) (string, error) {
	var s string
	// encoding/json reads null into a string as "": a null document would be
	// scored as an empty one (issue 28), where a null input of /v1/embeddings is
	// refused.
	if !isNull(d) && json.Unmarshal(d, &s) == nil {
		return s, nil
	}
	var text json.RawMessage
	if ExactFields(d, map[string]*json.RawMessage{"text": &text}) != nil {
		return "", &DecodeError{Param: "documents", Message: fmt.Sprintf("document %d holds the key 'text' more than once; send each key once.", i)}
	}
	if isNull(text) || json.Unmarshal(text, &s) != nil {
		return "", &DecodeError{Param: "documents", Message: fmt.Sprintf("document %d is %s; each document is a string or an object with a string 'text'", i, compact(d))}
	}
	return s, nil
}

type wireTEIRerankRequest struct {
	Query       json.RawMessage `json:"query"`
	Texts       json.RawMessage `json:"texts"`
	RawScores   json.RawMessage `json:"raw_scores"`
	ReturnText  json.RawMessage `json:"return_text"`
	Truncate    json.RawMessage `json:"truncate"`
	Direction   json.RawMessage `json:"truncation_direction"`
	Instruction json.RawMessage `json:"instruction"`
	Model       json.RawMessage `json:"model"`
}

// DecodeTEIRerankRequest parses and type-checks a POST /rerank body, its keys
// matched exactly as DecodeRerankRequest's.
func DecodeTEIRerankRequest(body []byte) (*TEIRerankRequest, error) {
	var w wireTEIRerankRequest
	if err := decodeExact(body, &w); err != nil {
		return nil, err
	}
	if err := CheckUTF8(body, "texts", teiTextItem); err != nil {
		return nil, err
	}
	var req TEIRerankRequest
	var err error
	if req.Query, err = reqString(w.Query, "query"); err != nil {
		return nil, err
	}
	if req.Instruction, err = optStringPtr(w.Instruction, "instruction"); err != nil {
		return nil, err
	}
	if req.RawScores, err = optBool(w.RawScores, "raw_scores"); err != nil {
		return nil, err
	}
	if req.ReturnText, err = optBool(w.ReturnText, "return_text"); err != nil {
		return nil, err
	}
	if req.Truncate, err = optBool(w.Truncate, "truncate"); err != nil {
		return nil, err
	}
	if req.Model, err = decodeModel(w.Model); err != nil {
		return nil, err
	}
	if !isNull(w.Direction) {
		dir, err := optString(w.Direction, "truncation_direction")
		if err != nil {
			return nil, err
		}
		switch dir {
		case "Left", "left":
			req.TruncateLeft = true
		case "Right", "right":
		default:
			return nil, &DecodeError{Param: "truncation_direction", Message: fmt.Sprintf("%s is not one of ['Left', 'Right'] - 'truncation_direction'", compact(w.Direction))}
		}
	}
	if isNull(w.Texts) {
		return nil, &DecodeError{Param: "texts", Message: "'texts' is a required property."}
	}
	var texts []json.RawMessage
	if err := json.Unmarshal(w.Texts, &texts); err != nil {
		return nil, &DecodeError{Param: "texts", Message: fmt.Sprintf("%s is not an array of strings - 'texts'", compact(w.Texts))}
	}
	req.Texts = make([]string, len(texts))
	for i, t := range texts {
		// As for a document of /v1/rerank: null is no text (encoding/json reads it
		// into a string as "").
		if isNull(t) || json.Unmarshal(t, &req.Texts[i]) != nil {
			return nil, &DecodeError{Param: "texts", Message: fmt.Sprintf("%s is %s; each text is a string", teiTextItem(i), compact(t))}
		}
	}
	return &req, nil
}

func reqString(raw json.RawMessage, param string) (string, error) {
	if isNull(raw) {
		return "", &DecodeError{Param: param, Message: fmt.Sprintf("'%s' is a required property.", param)}
	}
	return optString(raw, param)
}

func optStringPtr(raw json.RawMessage, param string) (*string, error) {
	if isNull(raw) {
		return nil, nil
	}
	s, err := optString(raw, param)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func optBool(raw json.RawMessage, param string) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, &DecodeError{Param: param, Message: fmt.Sprintf("%s is not of type 'boolean' - '%s'", compact(raw), param)}
	}
	return b, nil
}

// documentItem and teiTextItem name one text of a rerank body in an error, as the
// other messages about documents do.
func documentItem(i int) string { return fmt.Sprintf("document %d", i) }

func teiTextItem(i int) string { return fmt.Sprintf("texts[%d]", i) }

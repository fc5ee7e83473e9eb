package conformance

import (
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/embed-stack/embed-stack/internal/reference"
)

// rerankerPath is the generated reranker model (cmd/genmodel -task rerank); the
// tokenizer is the embedding test model's, the same Qwen3 vocabulary.
func rerankerPath() string { return filepath.Join(repoRoot, "models", "tiny-reranker.gguf") }

// rerankServer is a server for the tiny reranker, found as one by its GGUF layout
// (--task auto).
func rerankServer(t *testing.T, flags ...string) *server {
	t.Helper()
	return serverWith(t, append([]string{"--model", rerankerPath()}, flags...)...)
}

var rerankRef struct {
	once  sync.Once
	model *reference.Model
	err   error
}

const codeWrongTask = "model_task_mismatch"

// rerankTemplate is the model card's text for one pair, whole: the control tokens are
// split out and written as ids, the text between them tokenized.
func rerankTemplate(instruction, query, doc string) string {
	return "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n" +
		"<|im_start|>user\n<Instruct>: " + instruction + "\n<Query>: " + query + "\n<Document>: " + doc + "<|im_end|>\n" +
		"<|im_start|>assistant\n<think>\n\n</think>\n\n"
}

// expectRerank returns the token ids of a pair in the template and the reference
// P(yes) and logit(yes) - logit(no) for them.
func expectRerank(t *testing.T, instruction, query, doc string) (tokens []int32, p, logit float64) {
	t.Helper()
	tokens = rerankTokens(t, instruction, query, doc)
	rerankRef.once.Do(func() { rerankRef.model, rerankRef.err = reference.Load(rerankerPath()) })
	if rerankRef.err != nil {
		t.Fatal(rerankRef.err)
	}
	l, err := rerankRef.model.ClassifierLogits(tokens)
	if err != nil {
		t.Fatal(err)
	}
	logit = l[0] - l[1]
	return tokens, 1 / (1 + math.Exp(-logit)), logit
}

// rerankTokens returns the token ids of a pair in the template, by the reference
// tokenizer.
func rerankTokens(t *testing.T, instruction, query, doc string) (tokens []int32) {
	t.Helper()
	loadReference(t)
	text := rerankTemplate(instruction, query, doc)
	for text != "" {
		at, special := len(text), ""
		for _, s := range []string{"<|im_start|>", "<|im_end|>", "<think>", "</think>"} {
			if i := strings.Index(text, s); i >= 0 && i < at {
				at, special = i, s
			}
		}
		tokens = append(tokens, refState.tok.Encode(text[:at])...)
		if special == "" {
			break
		}
		id, ok := refState.tok.TokenID(special)
		if !ok {
			t.Fatalf("no token %s", special)
		}
		tokens = append(tokens, id)
		text = text[at+len(special):]
	}
	return tokens
}

type cohereRerank struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Results []struct {
		Index          int     `json:"index"`
		RelevanceScore float64 `json:"relevance_score"`
		Document       *struct {
			Text string `json:"text"`
		} `json:"document"`
	} `json:"results"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// rerankDocs are short and long documents: pairs through both of the engine's
// attention kernels (up to 128 tokens packed, longer alone).
var rerankDocs = []string{
	"The capital of China is Beijing.",
	"Gravity is a force that attracts two bodies towards each other.",
	strings.Repeat("A long passage about rivers, mountains and the weather of the north. ", 12),
	"",
}

// TestRerankAgainstReference: POST /v1/rerank on the tiny reranker gives each
// document the float64 reference's P(yes) (within 0.0025) for the pair in the model
// card's template, best first, top_n of them, with the documents when asked, and
// counts the template's tokens in usage.
func TestRerankAgainstReference(t *testing.T) {
	// --weights file: the reference is of the file's weights; --weights auto would
	// convert them to BF16 on a CPU with AVX-512 BF16, moving P(yes) by up to 0.003.
	s := rerankServer(t, "--weights", "file")
	const query = "What is the capital of China?"
	const task = "Given a web search query, retrieve relevant passages that answer the query"
	r := s.do(t, http.MethodPost, "/v1/rerank", map[string]any{
		"model": "rerank-v3.5", "query": query, "documents": rerankDocs, "top_n": 3, "return_documents": true,
	}, nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, truncate(r.body))
	}
	var got cohereRerank
	r.decode(t, &got)
	if got.Model != "rerank-v3.5" || len(got.ID) != 32 || len(got.Results) != 3 {
		t.Fatalf("model %q, id %q, %d results; want the model echoed, an id, 3 results", got.Model, got.ID, len(got.Results))
	}
	want := make([]float64, len(rerankDocs))
	tokens := 0
	for i, d := range rerankDocs {
		ids, p, _ := expectRerank(t, task, query, d)
		want[i] = p
		tokens += len(ids)
	}
	t.Logf("reference P(yes): %.6f", want)
	if got.Usage.PromptTokens != tokens || got.Usage.TotalTokens != tokens {
		t.Errorf("usage %+v, want %d tokens (every pair in the template)", got.Usage, tokens)
	}
	seen := map[int]bool{}
	for k, res := range got.Results {
		if res.Index < 0 || res.Index >= len(rerankDocs) || seen[res.Index] {
			t.Fatalf("result %d has index %d", k, res.Index)
		}
		seen[res.Index] = true
		if d := math.Abs(res.RelevanceScore - want[res.Index]); d > 0.0025 {
			t.Errorf("document %d: relevance_score %.6f, reference %.6f (off by %.2g, want ≤ 0.0025)", res.Index, res.RelevanceScore, want[res.Index], d)
		}
		if res.Document == nil || res.Document.Text != rerankDocs[res.Index] {
			t.Errorf("document %d: document %+v, want its text", res.Index, res.Document)
		}
		if k > 0 && res.RelevanceScore > got.Results[k-1].RelevanceScore {
			t.Errorf("results not best first: %.6f after %.6f", res.RelevanceScore, got.Results[k-1].RelevanceScore)
		}
	}
	// The left-out document is the worst by the reference.
	for i := range rerankDocs {
		if !seen[i] {
			for j := range seen {
				if want[i] > want[j] {
					t.Errorf("document %d (reference %.6f) was left out of top_n but %d (%.6f) kept", i, want[i], j, want[j])
				}
			}
		}
	}
	// The test means something only if the reference tells the documents apart.
	lo, hi := want[0], want[0]
	for _, p := range want {
		lo, hi = min(lo, p), max(hi, p)
	}
	if hi-lo < 0.01 {
		t.Errorf("reference scores %v are too close to tell a ranking apart", want)
	}
}

// TestRerankTEIShape: POST /rerank answers TEI's array, best first; raw_scores gives
// logit(yes) - logit(no), and a custom instruction goes into the template.
func TestRerankTEIShape(t *testing.T) {
	s := rerankServer(t)
	const query, task = "rivers", "Judge relevance to geography"
	r := s.do(t, http.MethodPost, "/rerank", map[string]any{
		"query": query, "texts": rerankDocs[:3], "raw_scores": true, "return_text": true, "instruction": task,
	}, nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, truncate(r.body))
	}
	var got []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
		Text  string  `json:"text"`
	}
	r.decode(t, &got)
	if len(got) != 3 {
		t.Fatalf("%d results, want 3", len(got))
	}
	for k, res := range got {
		_, _, logit := expectRerank(t, task, query, rerankDocs[res.Index])
		if d := math.Abs(res.Score - logit); d > 0.01 || res.Text != rerankDocs[res.Index] {
			t.Errorf("text %d: raw score %.6f, reference %.6f (want within 0.01); text %q", res.Index, res.Score, logit, abbreviate(res.Text))
		}
		if k > 0 && res.Score > got[k-1].Score {
			t.Errorf("results not best first: %.6f after %.6f", res.Score, got[k-1].Score)
		}
	}
}

// TestRerankTEITruncate: TEI's truncate on /rerank cuts a text whose pair is over
// the limit to the longest part (between two characters) whose pair fits, its
// beginning or, with truncation_direction Left, its end, and scores that pair: the
// reference's logit for the cut text, found here by the reference tokenizer. The
// same request without truncate is refused.
func TestRerankTEITruncate(t *testing.T) {
	const limit = 256
	s := rerankServer(t, "--max-input-tokens", "256", "--warm-max-tokens", "256")
	const query, task = "mountains", "Given a web search query, retrieve relevant passages that answer the query"
	doc := strings.Repeat("The north has wide rivers. ", 30) + strings.Repeat("Mountains are high and cold. ", 30)
	if n := len(rerankTokens(t, task, query, doc)); n <= limit {
		t.Fatalf("the document's pair has %d tokens; the test needs more than %d", n, limit)
	}
	if r := s.do(t, http.MethodPost, "/rerank", map[string]any{"query": query, "texts": []string{doc}}, nil); r.status != 400 {
		t.Fatalf("without truncate: %d %s, want 400", r.status, truncate(r.body))
	}
	for _, dir := range []string{"Right", "Left"} {
		// The longest part that fits, by bisection over character boundaries as
		// the server cuts (the counts grow with the part here).
		part := func(n int) string {
			if dir == "Left" {
				return doc[len(doc)-n:]
			}
			return doc[:n]
		}
		lo, hi := 0, len(doc) // ASCII: every byte is a character
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if len(rerankTokens(t, task, query, part(mid))) <= limit {
				lo = mid
			} else {
				hi = mid
			}
		}
		tokens, _, logit := expectRerank(t, task, query, part(lo))
		r := s.do(t, http.MethodPost, "/rerank", map[string]any{"query": query, "texts": []string{"short", doc}, "truncate": true, "truncation_direction": dir, "raw_scores": true}, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", dir, r.status, truncate(r.body))
		}
		var got []struct {
			Index int     `json:"index"`
			Score float64 `json:"score"`
		}
		r.decode(t, &got)
		if len(got) != 2 {
			t.Fatalf("%s: %d results, want 2", dir, len(got))
		}
		for _, res := range got {
			if res.Index == 1 && math.Abs(res.Score-logit) > 0.01 {
				t.Errorf("%s: the cut text's raw score %.6f, reference %.6f for its first %d bytes' pair of %d tokens (want within 0.01)", dir, res.Score, logit, lo, len(tokens))
			}
		}
	}
}

// TestRerankDocumentsOnTEIRoute: /rerank with Cohere's "documents" (vLLM's and
// Infinity's shape there) answers as /v1/rerank does, the same scores.
func TestRerankDocumentsOnTEIRoute(t *testing.T) {
	s := rerankServer(t)
	body := map[string]any{"model": "m", "query": "rivers", "documents": rerankDocs, "top_n": 2, "return_documents": true}
	var v1, tei cohereRerank
	for path, out := range map[string]*cohereRerank{"/v1/rerank": &v1, "/rerank": &tei} {
		r := s.do(t, http.MethodPost, path, body, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, r.status, truncate(r.body))
		}
		r.decode(t, out)
	}
	if len(tei.Results) != 2 || tei.Model != "m" || tei.Usage != v1.Usage || len(v1.Results) != 2 {
		t.Fatalf("/rerank %+v\n/v1/rerank %+v", tei, v1)
	}
	for i := range tei.Results {
		a, b := tei.Results[i], v1.Results[i]
		if a.Index != b.Index || a.RelevanceScore != b.RelevanceScore || a.Document == nil || a.Document.Text != rerankDocs[a.Index] {
			t.Errorf("result %d: /rerank %+v, /v1/rerank %+v", i, a, b)
		}
	}
}

// TestRerankErrors: what a reranker and an embedding server refuse, each with a 400
// in OpenAI's envelope.
func TestRerankErrors(t *testing.T) {
	tests := []struct {
		name   string
		srv    func(t *testing.T) *server
		path   string
		body   string
		status int
		param  string
		code   string
		msg    string
	}{
		{"embeddings on a reranker", func(t *testing.T) *server { return rerankServer(t) }, "/v1/embeddings", `{"input":"a"}`, 400, "model", codeWrongTask,
			"This server serves a reranker, which does not make embeddings; send query-document pairs to POST /v1/rerank, or serve an embedding model (Qwen3-Embedding) for embeddings."},
		{"rerank on an embedding model", defaultServer, "/v1/rerank", `{"query":"q","documents":["a"]}`, 400, "model", codeWrongTask,
			"This server serves an embedding model, which does not rerank; serve a reranker GGUF (Qwen3-Reranker) with `embed-stack serve --model` for /v1/rerank, or compare embeddings."},
		{"empty query", func(t *testing.T) *server { return rerankServer(t) }, "/v1/rerank", `{"query":"","documents":["a"]}`, 400, "query", codeEmptyInput,
			"'query' must hold text."},
		{"no documents", func(t *testing.T) *server { return rerankServer(t) }, "/v1/rerank", `{"query":"q","documents":[]}`, 400, "documents", codeEmptyInput,
			"'documents' must not be empty."},
		{"no texts", func(t *testing.T) *server { return rerankServer(t) }, "/rerank", `{"query":"q","texts":[]}`, 400, "texts", codeEmptyInput,
			"'texts' must not be empty."},
		{"pair too long", func(t *testing.T) *server {
			return rerankServer(t, "--max-input-tokens", "256", "--warm-max-tokens", "256")
		}, "/v1/rerank",
			`{"query":"q","documents":["short","` + strings.Repeat("word ", 300) + `"]}`, 400, "documents", codeContextLength,
			"document 1 with the query makes 374 tokens in the reranker's template; the limit is 256 tokens per pair (--max-input-tokens). Shorten the document or the query."},
	}
	// The count in the over-length message is the pair's, template included.
	if ids, _, _ := expectRerank(t, "Given a web search query, retrieve relevant passages that answer the query", "q", strings.Repeat("word ", 300)); len(ids) != 374 {
		t.Fatalf("the over-length pair has %d tokens by the reference template, the table says 374", len(ids))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.srv(t).do(t, http.MethodPost, tt.path, tt.body, nil)
			env := requireErrorEnvelope(t, r, tt.status)
			if env.Error.Message != tt.msg || env.Error.Param == nil || *env.Error.Param != tt.param || env.Error.Code == nil || *env.Error.Code != tt.code {
				t.Errorf("error %+v (param %v, code %v)\nwant message %q, param %q, code %q", env.Error, env.Error.Param, env.Error.Code, tt.msg, tt.param, tt.code)
			}
		})
	}
}

// TestRerankExactKeys: the rerank routes read JSON keys exactly, as
// /v1/embeddings does: a key in another case is an unknown field (ignored), and a
// key given twice is a 400 naming it, so that a proxy reading the body sees the
// request the server answers.
func TestRerankExactKeys(t *testing.T) {
	s := rerankServer(t)
	dup := func(key string) string {
		return `{"error":{"message":"The JSON body holds the key '` + key + `' more than once; send each key once.","type":"invalid_request_error","param":"` + key + `","code":null}}`
	}
	r := s.do(t, http.MethodPost, "/v1/rerank", []byte(`{"query":"q","documents":["a"],"documents":["b","c"]}`), nil)
	requireExactError(t, r, http.StatusBadRequest, dup("documents"))
	r = s.do(t, http.MethodPost, "/v2/rerank", []byte(`{"query":"q","query":"r","documents":["a"]}`), nil)
	requireExactError(t, r, http.StatusBadRequest, dup("query"))
	r = s.do(t, http.MethodPost, "/rerank", []byte(`{"query":"q","texts":["a"],"texts":["b"]}`), nil)
	requireExactError(t, r, http.StatusBadRequest, dup("texts"))
	r = s.do(t, http.MethodPost, "/v1/rerank", []byte(`{"Query":"q","documents":["a"]}`), nil)
	requireExactError(t, r, http.StatusBadRequest, `{"error":{"message":"'query' is a required property.","type":"invalid_request_error","param":"query","code":null}}`)

	// Beside the exact key, the other case is ignored: two documents scored (not
	// three), and both returned (TOP_N is not top_n).
	r = s.do(t, http.MethodPost, "/v1/rerank", []byte(`{"query":"q","documents":["a","b"],"Documents":["x","y","z"],"TOP_N":1}`), nil)
	if r.status != http.StatusOK || strings.Count(string(r.body), `"relevance_score"`) != 2 {
		t.Errorf("Documents beside documents: %d %s, want 200 with two results", r.status, truncate(r.body))
	}
	r = s.do(t, http.MethodPost, "/rerank", []byte(`{"query":"q","texts":["a"],"TEXTS":["x","y"],"Truncate":true}`), nil)
	if r.status != http.StatusOK || strings.Count(string(r.body), `"score"`) != 1 {
		t.Errorf("TEXTS beside texts: %d %s, want 200 with one result", r.status, truncate(r.body))
	}
}

// TestRerankInvalidUTF8: the rerank routes refuse bytes that are not UTF-8 with the
// same 400 as /v1/embeddings, naming the document, instead of scoring the text with
// each bad byte turned into U+FFFD.
func TestRerankInvalidUTF8(t *testing.T) {
	s := rerankServer(t)
	const notUTF8 = `{"error":{"message":"%s is not valid UTF-8 (byte %s); a JSON body must be UTF-8 (RFC 8259); decode the text from its real encoding before sending it.","type":"invalid_request_error","param":%s,"code":null}}`
	for _, tt := range []struct {
		path, body, item, byte_, param string
	}{
		{"/v1/rerank", "{\"query\":\"q\",\"documents\":[\"ok\",\"caf\xe9\"]}", "document 1", "0xE9", `"documents"`},
		{"/v2/rerank", "{\"query\":\"q\",\"documents\":[{\"text\":\"\xff\"}]}", "document 0", "0xFF", `"documents"`},
		{"/v1/rerank", "{\"query\":\"caf\xe9\",\"documents\":[\"ok\"]}", "'query'", "0xE9", "null"},
		{"/rerank", "{\"query\":\"q\",\"texts\":[\"ok\",\"\xc3\"]}", "texts[1]", "0xC3", `"texts"`},
	} {
		r := s.do(t, http.MethodPost, tt.path, []byte(tt.body), nil)
		requireExactError(t, r, http.StatusBadRequest, fmt.Sprintf(notUTF8, tt.item, tt.byte_, tt.param))
	}
}

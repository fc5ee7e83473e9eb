package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// encoderModel returns the path of a model `make models` writes beside the tiny
// one (the encoders of issue 25), skipping the test when it is absent.
func encoderModel(t *testing.T, rel string) string {
	t.Helper()
	path := filepath.Join(e2e.RepoRoot(t), rel)
	if _, err := os.Stat(path); err != nil {
		e2e.Require(t, rel+" is missing; generate it with `make models`")
	}
	return path
}

// miniLMReference is backends/llama/testdata/minilm-reference.json: 209 texts,
// among them non-English and emoji, HF's token ids for each ([CLS] ... [SEP]), the
// retrieval queries, and the vectors of an independent float64 forward pass of the
// original all-MiniLM-L6-v2 checkpoint (mean pooling, before normalisation).
type miniLMReference struct {
	Queries []int     `json:"queries"`
	Texts   []string  `json:"texts"`
	IDs     [][]int32 `json:"ids"`
	Vectors []string  `json:"vectors"`
}

func readMiniLMReference(t *testing.T) (miniLMReference, [][]float64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(e2e.RepoRoot(t), "backends", "llama", "testdata", "minilm-reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref miniLMReference
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	vecs := make([][]float64, len(ref.Vectors))
	for i, s := range ref.Vectors {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		vecs[i] = make([]float64, len(b)/4)
		for j := range vecs[i] {
			vecs[i][j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:])))
		}
	}
	return ref, vecs
}

// nearestText is the index of the text most similar to text q, q excluded.
func nearestText(vecs [][]float64, q int) int {
	best, at := -2.0, -1
	for i := range vecs {
		if c := e2e.Cosine(vecs[q], vecs[i]); i != q && c > best {
			best, at = c, i
		}
	}
	return at
}

// TestServeMiniLMRealWeights serves the real all-MiniLM-L6-v2, converted to GGUF in
// F32 and F16 (cmd/genmodel -convert), side by side through the real binary, and
// holds every answer to the reference: /tokenize gives HF's ids for each of the 209
// texts, and /v1/embeddings vectors of cosine >= 0.9999 (F32) and >= 0.999 (F16) to
// the float64 forward pass of the original checkpoint, with the same nearest
// neighbour for each retrieval query.
func TestServeMiniLMRealWeights(t *testing.T) {
	f32, f16 := encoderModel(t, "models/minilm-f32.gguf"), encoderModel(t, "models/minilm-f16.gguf")
	ref, want := readMiniLMReference(t)
	// --weights file: each file's own weights, which --weights auto would convert
	// to BF16 on a CPU with AVX-512 BF16 (TestServeMiniLMWeightsBF16 holds those).
	s := serveWith(t, "--model", "f32="+f32, "--model", "f16="+f16, "--weights", "file")
	for _, tc := range []struct {
		model string
		min   float64
	}{{"f32", 0.9999}, {"f16", 0.999}} {
		t.Run(tc.model, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"model": tc.model, "texts": ref.Texts})
			code, raw := call(t, s.URL+"/tokenize", string(body))
			if code != 200 {
				t.Fatalf("POST /tokenize: %d %s", code, raw)
			}
			var tok struct {
				Results []struct {
					IDs []int32 `json:"ids"`
				} `json:"results"`
			}
			if err := json.Unmarshal([]byte(raw), &tok); err != nil {
				t.Fatal(err)
			}
			for i, r := range tok.Results {
				if !slices.Equal(r.IDs, ref.IDs[i]) {
					t.Errorf("text %d %q: /tokenize gives %v, HF %v", i, ref.Texts[i], r.IDs, ref.IDs[i])
				}
			}
			got := e2e.Embeddings(t, s.URL, map[string]any{"model": tc.model, "input": ref.Texts})
			lowest, at := 1.0, 0
			for i := range got {
				if c := e2e.Cosine(got[i], want[i]); c < lowest {
					lowest, at = c, i
				}
			}
			if lowest < tc.min {
				t.Errorf("text %d %q: cosine %.7f with the reference, want >= %g", at, ref.Texts[at], lowest, tc.min)
			}
			for _, q := range ref.Queries {
				if a, b := nearestText(got, q), nearestText(want, q); a != b {
					t.Errorf("query %q: the server's nearest text is %q, the reference's %q", ref.Texts[q], ref.Texts[a], ref.Texts[b])
				}
			}
			t.Logf("%s: %d texts, lowest cosine %.7f (text %d), %d retrieval queries agree", tc.model, len(got), lowest, at, len(ref.Queries))
		})
	}
}

// TestServeFamilies serves three families side by side, each from its own GGUF
// (a BERT encoder with MiniLM's WordPiece, one with XLM-R's Unigram pooled by its
// first token instead of its mean, and the Qwen3 decoder), and checks what each
// model is (/info, /v1/models), what its inputs become (/tokenize: each family's
// prompts and special tokens), its limits (512 tokens for BERT, in the message and
// with truncation), its prompts' instruction rule, and that a vector does not
// depend on the request it came in.
func TestServeFamilies(t *testing.T) {
	bert, xlmr := encoderModel(t, "models/bert-tiny.gguf"), encoderModel(t, "models/xlmr-tiny.gguf")
	_, qwen := e2e.Paths(t)
	s := serveWith(t, "--model", "bert="+bert, "--model", "xlmr="+xlmr, "--model", "qwen="+qwen,
		"--pooling", "xlmr=cls", "--prompts", "bert=e5", "--prompts", "xlmr=nomic", "--weights", "file")

	got := infoModels(t, s.URL)
	wantInfo := []string{
		`bert bert mean ctx=512 WordPiece "[CLS] and [SEP]" dim=64 max=512 prompts=e5 "query: " "passage: " ""`,
		`xlmr bert cls ctx=512 Unigram "<s> and </s>" dim=64 max=512 prompts=nomic "{instruction}: " "search_document: " "search_query"`,
		`qwen qwen3 last ctx=32768 BPE "<|endoftext|>" dim=64 max=32768 prompts=qwen3 "Instruct: {instruction}\nQuery:" "" "Given a web search query, retrieve relevant passages that answer the query"`,
	}
	if !slices.Equal(got, wantInfo) {
		t.Errorf("GET /info models:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantInfo, "\n"))
	}
	code, raw := call(t, s.URL+"/v1/models", "")
	for _, want := range []string{
		`{"id":"bert","object":"model","created":`,
		`"owned_by":"embed-stack","root":"bert","task":"embedding","architecture":"bert","pooling":"mean","dimensions":64,"context_length":512,"tokenizer":"WordPiece","weights":"F16"}`,
		`"owned_by":"embed-stack","root":"xlmr","task":"embedding","architecture":"bert","pooling":"cls","dimensions":64,"context_length":512,"tokenizer":"Unigram","weights":"F16"}`,
		`"owned_by":"embed-stack","root":"qwen","task":"embedding","architecture":"qwen3","pooling":"last","dimensions":64,"context_length":32768,"tokenizer":"BPE","weights":"F16"}`,
	} {
		if code != 200 || !strings.Contains(raw, want) {
			t.Errorf("GET /v1/models: %d %s\nwant it to hold %s", code, raw, want)
		}
	}

	// What each family's inputs become: prompt, then special tokens around it.
	for _, tt := range []struct{ body, want string }{
		{`{"model":"bert","text":"hello world"}`, `"ids":[101,6019,1024,7592,2088,102]`}, // [CLS] passage : hello world [SEP]
		{`{"model":"bert","text":"hello world","input_type":"query"}`, `"ids":[101,23032,1024,7592,2088,102]`},
		{`{"model":"xlmr","text":"hello","input_type":"query"}`, `"ids":[0,33938,454,944,1294,12,33600,31,2]`}, // <s> search_query: hello </s>
		{`{"model":"qwen","text":"hi","input_type":"document"}`, `"ids":[6023,151643]`},
	} {
		code, raw := call(t, s.URL+"/tokenize", tt.body)
		if code != 200 || !strings.Contains(raw, tt.want) {
			t.Errorf("POST /tokenize %s: %d %s, want %s", tt.body, code, raw, tt.want)
		}
	}
	// The prompts' text, through the model's own tokenizer: nomic's default task,
	// and the request's instruction in its place.
	instr := func(model, text, instruction string) []int32 {
		body := map[string]any{"model": model, "text": text, "input_type": "query"}
		if instruction != "" {
			body["instruction"] = instruction
		}
		b, _ := json.Marshal(body)
		code, raw := call(t, s.URL+"/tokenize", string(b))
		if code != 200 {
			t.Fatalf("POST /tokenize %s: %d %s", b, code, raw)
		}
		var out struct {
			IDs []int32 `json:"ids"`
		}
		_ = json.Unmarshal([]byte(raw), &out)
		return out.IDs
	}
	plain := func(model, text string) []int32 {
		b, _ := json.Marshal(map[string]any{"model": model, "text": text, "input_type": "document"})
		_, raw := call(t, s.URL+"/tokenize", string(b))
		var out struct {
			IDs []int32 `json:"ids"`
		}
		_ = json.Unmarshal([]byte(raw), &out)
		return out.IDs
	}
	// The document prompt of xlmr is "search_document: ": strip it to compare.
	if a, b := instr("xlmr", "x", ""), instr("xlmr", "x", "search_query"); !slices.Equal(a, b) {
		t.Errorf("xlmr query without an instruction %v, with nomic's default task %v", a, b)
	}
	if a, b := instr("xlmr", "x", "clustering"), instr("xlmr", "x", ""); slices.Equal(a, b) {
		t.Errorf("xlmr: the instruction clustering changed nothing: %v", a)
	}
	if q, d := instr("bert", "x", ""), plain("bert", "x"); slices.Equal(q, d) {
		t.Errorf("bert: a query and a document tokenize the same: %v", q)
	}

	// e5's query prompt takes no instruction.
	code, raw = call(t, s.URL+"/v1/embeddings", `{"model":"bert","input":"x","instruction":"find"}`)
	if want := `This model's query prompt (e5: \"query: \") takes no instruction`; code != 400 || !strings.Contains(raw, want) {
		t.Errorf("an instruction to e5: %d %s, want 400 %s", code, raw, want)
	}
	// BERT's 512 tokens: the limit in the message, or truncation to it.
	long := strings.Repeat("word ", 600)
	code, raw = call(t, s.URL+"/v1/embeddings", fmt.Sprintf(`{"model":"bert","input":%q}`, long))
	if want := "This model's maximum context length is 512 tokens, however you requested 604 tokens"; code != 400 || !strings.Contains(raw, want) {
		t.Errorf("600 words to BERT: %d %s, want 400 with %q", code, raw, want)
	}
	code, raw = call(t, s.URL+"/v1/embeddings", fmt.Sprintf(`{"model":"bert","input":%q,"truncate":true}`, long))
	if code != 200 || !strings.Contains(raw, `"prompt_tokens":512`) {
		t.Errorf("600 words to BERT, truncated: %d %.300s", code, raw)
	}
	// Qwen3's limit is its own.
	code, raw = call(t, s.URL+"/v1/embeddings", fmt.Sprintf(`{"model":"qwen","input":%q}`, long))
	if code != 200 {
		t.Errorf("600 words to Qwen3: %d %.300s", code, raw)
	}

	// A vector is the same whatever request carries it, packed with others or
	// alone, and pooling changes it: xlmr pools CLS.
	texts := []string{"a short text", "another, slightly longer text to pack beside it", strings.Repeat("long ", 200)}
	for _, model := range []string{"bert", "xlmr", "qwen"} {
		all := e2e.Embeddings(t, s.URL, map[string]any{"model": model, "input": texts})
		for i, text := range texts {
			alone := e2e.Embeddings(t, s.URL, map[string]any{"model": model, "input": text})[0]
			if !slices.Equal(alone, all[i]) {
				t.Errorf("%s: text %d alone and in a batch differ (cosine %.9f)", model, i, e2e.Cosine(alone, all[i]))
			}
		}
	}
}

// TestServeFamiliesBadInput: a model embed-stack would serve wrongly stops serve at
// once, before any worker starts, with exit status 1 and a message naming what is
// wrong and what to do.
func TestServeFamiliesBadInput(t *testing.T) {
	bin, _ := e2e.Paths(t)
	bert := encoderModel(t, "models/bert-tiny.gguf")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown pooling", []string{"--model", bert, "--pooling", "max"}, `--pooling "max": give mean, cls or last, or MODEL=POOLING`},
		{"an unknown prompt convention", []string{"--model", bert, "--prompts", "bge-m3"}, `--prompts "bge-m3": give auto or one of qwen3, nomic, e5, e5-instruct, bge, bge-zh, arctic-v2, gemma, jina-v3, none, or MODEL=NAME`},
		{"a pooling for a model not served", []string{"--model", "a=" + bert, "--pooling", "b=cls"}, `--pooling "b=cls": "b" is not the NAME of a --model NAME=MODEL (or --model-name)`},
		{"an input limit above BERT's", []string{"--model", bert, "--max-input-tokens", "1024"}, "--max-input-tokens (1024) exceeds what the model takes (512 tokens: its training context); lower it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"serve", "--addr", e2e.FreeAddr(t)}, tt.args...)...)
			out, err := cmd.CombinedOutput()
			if e2e.ExitCode(err) == 0 || !strings.Contains(string(out), tt.want) {
				t.Errorf("serve %q: %v\n%s\nwant a refusal holding %q", tt.args, err, out, tt.want)
			}
		})
	}
}

// TestEmbedJobFamilies runs the batch job on the real MiniLM, as given and with
// its pooling and document prompt changed by flag: the vectors equal those of a
// server given the same settings for one of its models (MODEL=VALUE), for the same
// texts (same routing, same engine), and the changed ones are other vectors.
func TestEmbedJobFamilies(t *testing.T) {
	bin, _ := e2e.Paths(t)
	model := encoderModel(t, "models/minilm-f16.gguf")
	texts := []string{"The quick brown fox jumps over the lazy dog.", "Das ist ein schönes Haus.", "我爱北京天安门", "Great job! 👍🏽"}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte(strings.Join(texts, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := func(name string, flags ...string) [][]float64 {
		out := filepath.Join(dir, name+".jsonl")
		cmd := exec.Command(bin, append([]string{"embed", "--model", model, "--input", in, "--output", out, "--threads", "1"}, flags...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("embed %q: %v\n%s", flags, err, b)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != len(texts) {
			t.Fatalf("embed %q: %d output lines for %d texts", flags, len(lines), len(texts))
		}
		vecs := make([][]float64, len(lines))
		for i, line := range lines {
			var row struct {
				Embedding []float64 `json:"embedding"`
			}
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatal(err)
			}
			vecs[i] = row.Embedding
		}
		return vecs
	}
	plain := job("plain")
	// A document prompt holding '=' whose text before it names no model.
	changed := job("changed", "--pooling", "cls", "--document-prompt", "x=y ")
	s := serveWith(t, "--model", "plain="+model, "--model", "changed="+model, "--pooling", "changed=cls", "--document-prompt", "changed=x=y ")
	for _, tt := range []struct {
		model string
		got   [][]float64
	}{{"plain", plain}, {"changed", changed}} {
		want := e2e.Embeddings(t, s.URL, map[string]any{"model": tt.model, "input": texts})
		for i, v := range tt.got {
			if len(v) != 384 || e2e.Cosine(v, want[i]) < 0.9999999 {
				t.Errorf("%s text %d: the job's vector (%d values) and the server's differ (cosine %.9f)", tt.model, i, len(v), e2e.Cosine(v, want[i]))
			}
		}
	}
	for i := range texts {
		if c := e2e.Cosine(plain[i], changed[i]); c > 0.999 {
			t.Errorf("text %d: CLS pooling after \"x=y \" gives the same vector as mean pooling without (cosine %.6f)", i, c)
		}
	}
}

// TestServeCustomPrompts gives prompts by flag: a query prompt for one model whose
// instruction goes where {instruction} is, and a document prompt whose text
// before '=' names no model, so that it is every model's. /info shows them as the
// "custom" convention, and /tokenize what they make of an input.
func TestServeCustomPrompts(t *testing.T) {
	bert := encoderModel(t, "models/bert-tiny.gguf")
	_, qwen := e2e.Paths(t)
	s := serveWith(t, "--model", "bert="+bert, "--model", "qwen="+qwen,
		"--query-prompt", "bert={instruction} ", "--document-prompt", "x=y ")
	code, raw := call(t, s.URL+"/info", "")
	var info struct {
		Models []struct {
			ID      string `json:"id"`
			Prompts struct {
				Family, Query, Document, Instruction string
			} `json:"prompts"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(raw), &info); code != 200 || err != nil {
		t.Fatalf("GET /info: %d %v %s", code, err, raw)
	}
	got := make([]string, len(info.Models))
	for i, m := range info.Models {
		got[i] = fmt.Sprintf("%s %s %q %q %q", m.ID, m.Prompts.Family, m.Prompts.Query, m.Prompts.Document, m.Prompts.Instruction)
	}
	// A query prompt with {instruction} and no task of its convention's takes
	// Qwen3's.
	want := []string{
		`bert custom "{instruction} " "x=y " "Given a web search query, retrieve relevant passages that answer the query"`,
		`qwen custom "Instruct: {instruction}\nQuery:" "x=y " "Given a web search query, retrieve relevant passages that answer the query"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("GET /info prompts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ids := func(body map[string]any) string {
		b, _ := json.Marshal(body)
		code, raw := call(t, s.URL+"/tokenize", string(b))
		var out struct {
			IDs []int32 `json:"ids"`
		}
		if err := json.Unmarshal([]byte(raw), &out); code != 200 || err != nil || len(out.IDs) == 0 {
			t.Fatalf("POST /tokenize %s: %d %v %s", b, code, err, raw)
		}
		return fmt.Sprint(out.IDs)
	}
	// The document "hello" is "x=y hello"; so is the query "hello" with the
	// instruction "x=y", and another instruction makes another input.
	doc := ids(map[string]any{"model": "bert", "text": "hello", "input_type": "document"})
	if q := ids(map[string]any{"model": "bert", "text": "hello", "input_type": "query", "instruction": "x=y"}); q != doc {
		t.Errorf("bert: the query with the instruction x=y is %s, the document %s; want the same", q, doc)
	}
	if q := ids(map[string]any{"model": "bert", "text": "hello", "input_type": "query", "instruction": "z"}); q == doc {
		t.Errorf("bert: the query with the instruction z is the document's %s", q)
	}
	// [CLS] x = y hello [SEP], in MiniLM's WordPiece vocabulary.
	if want := "[101 1060 1027 1061 7592 102]"; doc != want {
		t.Errorf("bert: the document hello is %s, want %s", doc, want)
	}
}

// infoModels describes each model of GET /info in one line: its id, architecture,
// pooling, context, tokenizer, special tokens, dimensions, input limit and prompts.
func infoModels(t *testing.T, url string) []string {
	t.Helper()
	code, raw := call(t, url+"/info", "")
	if code != 200 {
		t.Fatalf("GET /info: %d %s", code, raw)
	}
	var info struct {
		Models []struct {
			ID             string `json:"id"`
			Architecture   string `json:"architecture"`
			Pooling        string `json:"pooling"`
			ContextLength  int    `json:"context_length"`
			Tokenizer      string `json:"tokenizer"`
			SpecialTokens  string `json:"special_tokens"`
			Dimensions     int    `json:"dimensions"`
			MaxInputTokens int    `json:"max_input_tokens"`
			Prompts        struct {
				Family, Query, Document, Instruction string
			} `json:"prompts"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(info.Models))
	for i, m := range info.Models {
		got[i] = fmt.Sprintf("%s %s %s ctx=%d %s %q dim=%d max=%d prompts=%s %q %q %q", m.ID, m.Architecture, m.Pooling, m.ContextLength, m.Tokenizer,
			m.SpecialTokens, m.Dimensions, m.MaxInputTokens, m.Prompts.Family, m.Prompts.Query, m.Prompts.Document, m.Prompts.Instruction)
	}
	return got
}

// TestServeEveryArchitecture serves a random-weight GGUF of every architecture
// embed-stack serves (cmd/genmodel -arch, `make models`), all side by side, and
// checks through the real binary that each is what its GGUF says (/info), embeds
// with its own special tokens, and gives unit vectors that do not depend on the
// request they came in.
func TestServeEveryArchitecture(t *testing.T) {
	_, qwen := e2e.Paths(t)
	models := []struct{ name, path, arch, pooling, tokenizer, special string }{
		{"qwen3", qwen, "qwen3", "last", "BPE", "<|endoftext|>"},
		{"bert", encoderModel(t, "models/bert-tiny.gguf"), "bert", "mean", "WordPiece", "[CLS] and [SEP]"},
		{"nomic-bert", encoderModel(t, "models/nomic-bert-tiny.gguf"), "nomic-bert", "mean", "WordPiece", "[CLS] and [SEP]"},
		{"nomic-bert-moe", encoderModel(t, "models/nomic-bert-moe-tiny.gguf"), "nomic-bert-moe", "mean", "Unigram", "<s> and </s>"},
		{"jina-bert-v2", encoderModel(t, "models/jina-bert-v2-tiny.gguf"), "jina-bert-v2", "mean", "WordPiece", "[CLS] and [SEP]"},
		{"jina-bert-v3", encoderModel(t, "models/jina-bert-v3-tiny.gguf"), "jina-bert-v3", "mean", "Unigram", "<s> and </s>"},
		{"neo-bert", encoderModel(t, "models/neo-bert-tiny.gguf"), "neo-bert", "cls", "WordPiece", "[CLS] and [SEP]"},
		{"t5encoder", encoderModel(t, "models/t5encoder-tiny.gguf"), "t5encoder", "mean", "Unigram", "<s> and </s>"},
		{"gemma-embedding", encoderModel(t, "models/gemma-embedding-tiny.gguf"), "gemma-embedding", "mean", "SentencePiece BPE", "<bos> and <eos>"},
	}
	var args []string
	for _, m := range models {
		args = append(args, "--model", m.name+"="+m.path)
	}
	s := serveWith(t, args...)
	code, raw := call(t, s.URL+"/info", "")
	if code != 200 {
		t.Fatalf("GET /info: %d %s", code, raw)
	}
	var info struct {
		Models []struct {
			ID, Architecture, Pooling, Tokenizer string
			SpecialTokens                        string `json:"special_tokens"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Models) != len(models) {
		t.Fatalf("GET /info lists %d models, want %d", len(info.Models), len(models))
	}
	texts := []string{"hello world", "a second, longer text about something else entirely", strings.Repeat("many words ", 80)}
	for i, m := range models {
		got := info.Models[i]
		if got.ID != m.name || got.Architecture != m.arch || got.Pooling != m.pooling || got.Tokenizer != m.tokenizer || got.SpecialTokens != m.special {
			t.Errorf("GET /info model %d: %+v, want %+v", i, got, m)
		}
		all := e2e.Embeddings(t, s.URL, map[string]any{"model": m.name, "input": texts})
		for j, text := range texts {
			if n := math.Sqrt(dot(all[j], all[j])); math.Abs(n-1) > 1e-6 {
				t.Errorf("%s: text %d has norm %.9f, want 1", m.name, j, n)
			}
			alone := e2e.Embeddings(t, s.URL, map[string]any{"model": m.name, "input": text})[0]
			if !slices.Equal(alone, all[j]) {
				t.Errorf("%s: text %d alone and in a batch differ (cosine %.9f)", m.name, j, e2e.Cosine(alone, all[j]))
			}
		}
		if c := e2e.Cosine(all[0], all[1]); c > 0.9999 {
			t.Errorf("%s: two different texts give cosine %.6f", m.name, c)
		}
	}
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

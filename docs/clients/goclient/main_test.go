package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestMain runs the tests with the weights the binary converts at load kept out of
// the user's cache (e2e.Main).
func TestMain(m *testing.M) { e2e.Main(m) }

// defaultURL is the address every snippet uses; tests point it at their server.
const defaultURL = "http://127.0.0.1:8080"

// printedTol bounds the difference between a similarity printed with 4 decimals from
// float32 sums and the float64 one computed here.
const printedTol = 1.5e-4

var (
	docs  = []string{"The capital of China is Beijing.", "Gravity is a force that attracts two bodies towards each other."}
	query = "What is the capital of China?"
)

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// TestGoSnippet runs the go-openai snippet against a real server: it must print each
// document's similarity to the query embedded as a query.
func TestGoSnippet(t *testing.T) {
	s := e2e.Serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := rank(ctx, s.URL+"/v1", &out); err != nil {
		t.Fatalf("rank: %v", err)
	}
	d := e2e.Embeddings(t, s.URL, map[string]any{"model": "m", "input": docs, "input_type": "document"})
	q := e2e.Embeddings(t, s.URL, map[string]any{"model": "m", "input": query, "input_type": "query"})[0]
	qd := e2e.Embeddings(t, s.URL, map[string]any{"model": "m", "input": query, "input_type": "document"})[0]
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(docs) {
		t.Fatalf("printed %q, want %d lines", out.String(), len(docs))
	}
	for i, line := range lines {
		num, text, _ := strings.Cut(line, " ")
		got, err := strconv.ParseFloat(num, 64)
		if err != nil || text != docs[i] || !regexp.MustCompile(`^-?\d+\.\d{4}$`).MatchString(num) {
			t.Fatalf("line %d %q, want a similarity with 4 decimals and %q", i, line, docs[i])
		}
		want, asDoc := dot(q, d[i]), dot(qd, d[i])
		if math.Abs(got-want) > printedTol {
			t.Errorf("doc %d: printed %v, raw requests give %v", i, got, want)
		}
		if math.Abs(want-asDoc) > 10*printedTol && math.Abs(got-asDoc) <= printedTol {
			t.Errorf("doc %d: %v is the similarity of the query embedded as a document", i, got)
		}
	}
}

// runShell runs a shell snippet with its address pointed at baseURL.
func runShell(t *testing.T, script, baseURL string) []byte {
	t.Helper()
	if !strings.Contains(script, defaultURL) {
		t.Fatalf("the snippet does not use %s:\n%s", defaultURL, script)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		e2e.Require(t, "curl is not installed")
	}
	out, err := exec.Command("sh", "-c", strings.ReplaceAll(script, defaultURL, baseURL)).Output()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, script)
	}
	return out
}

type embeddingsResponse struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func decodeStrict(t *testing.T, b []byte) embeddingsResponse {
	t.Helper()
	var r embeddingsResponse
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("response %.300q: %v", b, err)
	}
	return r
}

// TestCurlSnippet runs docs/clients/curl.sh through sh: a 64-dimensional query vector
// equal to the raw request's.
func TestCurlSnippet(t *testing.T) {
	s := e2e.Serve(t)
	script, err := os.ReadFile("../curl.sh")
	if err != nil {
		t.Fatal(err)
	}
	r := decodeStrict(t, runShell(t, string(script), s.URL))
	if r.Object != "list" || len(r.Data) != 1 || len(r.Data[0].Embedding) != 64 || r.Model != "qwen3-embedding-0.6b" || r.Usage.TotalTokens == 0 {
		t.Fatalf("response %+v, want one 64-dimensional vector, the model echoed and usage", r)
	}
	want := e2e.Embeddings(t, s.URL, map[string]any{"model": "m", "input": query, "input_type": "query", "dimensions": 64})[0]
	if c := e2e.Cosine(r.Data[0].Embedding, want); c < 0.999999 {
		t.Errorf("cosine %.7f with the raw query request, want ≥ 0.999999", c)
	}
}

// TestReadmeCurl runs the README's curl example as it is written (only the address
// changed): it must answer 200 with one vector per input.
func TestReadmeCurl(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(e2e.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```sh\n(curl [^`]*?/v1/embeddings.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```sh block with a curl to /v1/embeddings")
	}
	s := e2e.Serve(t)
	for _, b := range blocks {
		script := string(b[1])
		var body struct {
			Input []string `json:"input"`
		}
		if m := regexp.MustCompile(`(?s)-d '(.*?)'`).FindStringSubmatch(script); m == nil || json.Unmarshal([]byte(m[1]), &body) != nil {
			t.Fatalf("cannot read the request body of\n%s", script)
		}
		r := decodeStrict(t, runShell(t, script, s.URL))
		if len(r.Data) != len(body.Input) {
			t.Errorf("README curl: %d vectors for %d inputs\n%s", len(r.Data), len(body.Input), script)
		}
	}
}

// TestClientsPage: every snippet file appears in docs/clients.md exactly as it is,
// after a <!-- snippet: clients/FILE --> marker, and every marker names a file.
func TestClientsPage(t *testing.T) {
	page, err := os.ReadFile("../../clients.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- snippet: (clients/[^ ]+) -->\n```[a-z]*\n(.*?)```\n")
	var shown []string
	for _, m := range re.FindAllSubmatch(page, -1) {
		name := string(m[1])
		src, err := os.ReadFile(filepath.Join("../..", name))
		if err != nil {
			t.Errorf("the page shows %s, which does not exist", name)
			continue
		}
		if string(m[2]) != string(src) {
			t.Errorf("the page's %s differs from the file", name)
		}
		shown = append(shown, name)
	}
	var files []string
	for _, pat := range []string{"../*.mjs", "../*.py", "../*.sh", "main.go"} {
		found, _ := filepath.Glob(pat)
		for _, f := range found {
			if strings.HasSuffix(f, ".test.mjs") {
				continue
			}
			base, _ := filepath.Abs("../..")
			abs, _ := filepath.Abs(f)
			rel, err := filepath.Rel(base, abs)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, filepath.ToSlash(rel))
		}
	}
	slices.Sort(files)
	slices.Sort(shown)
	if !slices.Equal(files, shown) {
		t.Errorf("the page shows %v; the snippet files are %v", shown, files)
	}
	if strings.Count(string(page), "<!-- snippet:") != len(shown) {
		t.Errorf("%d markers, %d well-formed snippet blocks", strings.Count(string(page), "<!-- snippet:"), len(shown))
	}
}

package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// defaultURL is the address every example uses: what `make run` serves.
const defaultURL = "http://127.0.0.1:8080"

// curlBlock is a fenced block of a page that runs curl, with what the page says about it.
type curlBlock struct {
	page  string
	line  int
	code  string
	serve []string // the flags of the page's serve command before it (nil: `make run`'s)
	shown string   // the answer the page shows for it, if any
}

var (
	blockRE = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```[ \t]*$")
	serveRE = regexp.MustCompile(`(?m)^(?:bin/)?embed-stack serve\b(.*)$|^make run\b(.*)$`)
)

// curlBlocks finds every fenced block with a curl command in README.md and docs/.
func curlBlocks(t *testing.T, root string) []curlBlock {
	t.Helper()
	var out []curlBlock
	for _, page := range pages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		blocks := blockRE.FindAllStringSubmatchIndex(text, -1)
		var serve []string
		for i, m := range blocks {
			code := text[m[4]:m[5]]
			// A serve command in a block sets the server of the examples after it.
			joined := strings.ReplaceAll(code, "\\\n", " ")
			if sm := serveRE.FindStringSubmatch(joined); sm != nil {
				serve = serveFlags(sm[0])
			}
			if !regexp.MustCompile(`(?m)^curl `).MatchString(code) {
				continue
			}
			cb := curlBlock{page: page, line: strings.Count(text[:m[0]], "\n") + 1, code: code, serve: serve}
			// The answer: a `# {…}` comment in the block, or the next block when at most
			// three lines of text stand between them and it holds JSON.
			if cm := regexp.MustCompile(`(?m)^# (\{.*)$`).FindStringSubmatch(code); cm != nil {
				cb.shown = cm[1]
			} else if i+1 < len(blocks) {
				next := blocks[i+1]
				between := strings.TrimSpace(text[m[1]:next[0]])
				body := strings.TrimSpace(text[next[4]:next[5]])
				if strings.Count(between, "\n") < 3 && (strings.HasPrefix(body, "{") || strings.HasPrefix(body, "[")) {
					cb.shown = body
				}
			}
			out = append(out, cb)
		}
	}
	return out
}

// serveFlags turns a page's `embed-stack serve …` or `make run MODEL=…` into serve's
// flags with the test models in place of the page's: a reranker (its name says so)
// becomes models/tiny-reranker.gguf, any other model models/tiny.gguf.
func serveFlags(cmd string) []string {
	fields := strings.Fields(strings.SplitN(cmd, "#", 2)[0])
	var flags []string
	if fields[0] == "make" {
		model := "Qwen/Qwen3-Embedding-0.6B-GGUF"
		for _, f := range fields {
			if v, ok := strings.CutPrefix(f, "MODEL="); ok {
				model = v
			}
		}
		return []string{"--model", testModel(model)}
	}
	for i := 2; i < len(fields); i++ {
		f := fields[i]
		if f == "--model" && i+1 < len(fields) {
			v := fields[i+1]
			if name, ref, ok := strings.Cut(v, "="); ok && !strings.Contains(name, "/") {
				v = name + "=" + testModel(ref)
			} else {
				v = testModel(v)
			}
			flags = append(flags, f, v)
			i++
			continue
		}
		flags = append(flags, f)
	}
	return flags
}

func testModel(ref string) string {
	if strings.Contains(strings.ToLower(ref), "reranker") {
		return "models/tiny-reranker.gguf"
	}
	return "models/tiny.gguf"
}

// TestCurlExamples runs every curl example of README.md and docs/ as it is written
// (only its address changed) against the real binary serving what the page's own serve
// command serves (several models where it says so; the test models in place of the
// Hub's), and checks the status and the answer: its shape against the answer the page
// shows (every key, every literal value, the length of each elided vector), and for
// embeddings one vector per input of the requested dimensions, for rerank top_n
// results. An example this test cannot check fails, so that a new one gets a check.
func TestCurlExamples(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks := curlBlocks(t, root)
	if len(blocks) < 4 {
		t.Fatalf("%d curl examples found; the pages have at least 4", len(blocks))
	}
	bin, _ := e2e.Paths(t)
	// One server per distinct set of flags, shared by the examples that state it.
	flagsOf := func(b curlBlock) []string {
		if b.serve == nil {
			return []string{"--model", "models/tiny.gguf"}
		}
		return b.serve
	}
	servers := map[string]string{}
	for _, b := range blocks {
		key := strings.Join(flagsOf(b), " ")
		if _, ok := servers[key]; ok {
			continue
		}
		addr := e2e.FreeAddr(t)
		cmd := exec.Command(bin, append([]string{"serve", "--addr", addr, "--threads", "1"}, flagsOf(b)...)...)
		cmd.Dir = root
		p := e2e.Start(t, cmd)
		servers[key] = "http://" + addr
		p.WaitReady(t, servers[key], e2e.ReadyTimeout)
	}
	for _, b := range blocks {
		t.Run(fmt.Sprintf("%s:%d", b.page, b.line), func(t *testing.T) {
			flags := flagsOf(b)
			url := servers[strings.Join(flags, " ")]
			if !strings.Contains(b.code, defaultURL) {
				t.Fatalf("the example does not use %s", defaultURL)
			}
			script := strings.ReplaceAll(b.code, defaultURL, url)
			script = regexp.MustCompile(`(?m)^curl `).ReplaceAllString(script, `curl -w '\n%{http_code}' `)
			out, err := exec.Command("sh", "-c", script).Output()
			if err != nil {
				t.Fatalf("sh: %v\n%s", err, script)
			}
			// -w wrote the status after a newline, after the body.
			i := strings.LastIndex(string(out), "\n")
			if i < 0 {
				t.Fatalf("no status line in %q", out)
			}
			body, status := strings.TrimSpace(string(out[:i])), strings.TrimSpace(string(out[i+1:]))
			var got any
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("status %s, not JSON: %v\n%.500s", status, err, body)
			}
			want := "200"
			if code := errorCode(b.shown); code != "" {
				want = strconv.Itoa(statusOf[code])
			}
			if status != want {
				t.Fatalf("status %s, want %s (server flags %v):\n%.500s", status, want, flags, body)
			}
			checked := false
			if b.shown != "" {
				shown, err := parseShown(b.shown)
				if err != nil {
					t.Fatalf("the answer the page shows is not JSON with elisions: %v\n%s", err, b.shown)
				}
				if err := sameShape("", shown, got); err != nil {
					t.Errorf("the answer differs from the page's: %v\npage:\n%s\ngot:\n%.800s", err, b.shown, body)
				}
				checked = true
			}
			if req := requestBody(t, b.code); req != nil && status == "200" {
				checked = checkRoute(t, b.code, req, got) || checked
			}
			if !checked {
				t.Error("no check for this example: show its answer on the page or teach checkRoute its route")
			}
		})
	}
}

// statusOf is the HTTP status of the error codes an example may show.
var statusOf = map[string]int{"model_not_found": 404, "model_task_mismatch": 400, "invalid_value": 400, "context_length_exceeded": 400}

func errorCode(shown string) string {
	m := regexp.MustCompile(`"code":\s*"([a-z_]+)"`).FindStringSubmatch(shown)
	if m == nil || !strings.Contains(shown, `"error"`) {
		return ""
	}
	return m[1]
}

// requestBody is the JSON of the example's -d argument.
func requestBody(t *testing.T, code string) map[string]any {
	t.Helper()
	m := regexp.MustCompile(`(?s)-d '(.*?)'`).FindStringSubmatch(code)
	if m == nil {
		return nil
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(m[1]), &body); err != nil {
		t.Fatalf("the request body is not JSON: %v\n%s", err, m[1])
	}
	return body
}

// checkRoute checks what the request asks of the answer: for /v1/embeddings one vector
// per input, of `dimensions` numbers when it names them; for /v1/rerank top_n results
// (or one per document), best first. It reports whether it knew the route.
func checkRoute(t *testing.T, code string, req map[string]any, got any) bool {
	t.Helper()
	ans, _ := got.(map[string]any)
	switch {
	case strings.Contains(code, "/v1/embeddings"):
		inputs := 1
		if in, ok := req["input"].([]any); ok {
			inputs = len(in)
		}
		data, _ := ans["data"].([]any)
		if len(data) != inputs {
			t.Errorf("%d vectors for %d inputs", len(data), inputs)
			return true
		}
		for i, d := range data {
			vec, _ := d.(map[string]any)["embedding"].([]any)
			if dims, ok := req["dimensions"].(float64); ok && len(vec) != int(dims) {
				t.Errorf("vector %d has %d numbers; the request asks %v", i, len(vec), dims)
			}
			if len(vec) == 0 {
				t.Errorf("vector %d is empty", i)
			}
		}
		if name, ok := req["model"].(string); ok && ans["model"] != name {
			t.Errorf("model %v, want the name asked, %q", ans["model"], name)
		}
		return true
	case strings.Contains(code, "/v1/rerank"):
		docs, _ := req["documents"].([]any)
		want := len(docs)
		if n, ok := req["top_n"].(float64); ok && int(n) < want {
			want = int(n)
		}
		results, _ := ans["results"].([]any)
		if len(results) != want {
			t.Errorf("%d results, want %d", len(results), want)
		}
		var scores []float64
		for _, r := range results {
			s, _ := r.(map[string]any)["relevance_score"].(float64)
			scores = append(scores, s)
		}
		if !slices.IsSortedFunc(scores, func(a, b float64) int { return -cmpFloat(a, b) }) {
			t.Errorf("scores %v not best first", scores)
		}
		return true
	}
	return false
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Elisions the pages use in the answers they show, and what they stand for.
const (
	anyValue = "\x00any"     // <text>, "<text>": any value
	moreKeys = "\x00more"    // , ...} : the object may have other keys
	someNums = "\x00numbers" // [12, -31, ...]: an array of numbers of any length
)

var (
	countedRE = regexp.MustCompile(`\[\s*…\s*(\d+) numbers\s*…\s*\]`)
	numsRE    = regexp.MustCompile(`\[(-?\d+(?:\.\d+)?\s*,\s*)+\.\.\.\]`)
	quotedRE  = regexp.MustCompile(`"<[^">]*>"`)
	bareRE    = regexp.MustCompile(`<[^<>"]*>`)
	moreRE    = regexp.MustCompile(`,\s*\.\.\.\s*\}`)
)

// parseShown reads an answer as a page shows it, elisions replaced by markers.
func parseShown(s string) (any, error) {
	s = countedRE.ReplaceAllString(s, `"\u0000numbers:$1"`)
	s = numsRE.ReplaceAllString(s, `"\u0000numbers"`)
	s = quotedRE.ReplaceAllString(s, `"\u0000any"`)
	s = bareRE.ReplaceAllString(s, `"\u0000any"`)
	s = moreRE.ReplaceAllString(s, `, "\u0000more": true}`)
	var v any
	err := json.Unmarshal([]byte(s), &v)
	return v, err
}

// sameShape compares an answer with the one a page shows: the same keys (unless the page
// elides more), the same literal values, an elided value anything, an elided array of
// numbers numbers (of the stated count).
func sameShape(path string, shown, got any) error {
	switch w := shown.(type) {
	case string:
		switch {
		case w == anyValue:
			return nil
		case strings.HasPrefix(w, someNums):
			arr, ok := got.([]any)
			if !ok {
				return fmt.Errorf("%s: %T, want an array of numbers", path, got)
			}
			for _, x := range arr {
				if _, ok := x.(float64); !ok {
					return fmt.Errorf("%s: %v in the array is not a number", path, x)
				}
			}
			if n, ok := strings.CutPrefix(w, someNums+":"); ok && strconv.Itoa(len(arr)) != n {
				return fmt.Errorf("%s: %d numbers, the page says %s", path, len(arr), n)
			}
			return nil
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %T, want an object", path, got)
		}
		for k, v := range w {
			if k == moreKeys {
				continue
			}
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s: no key %q", path, k)
			}
			if err := sameShape(path+"."+k, v, gv); err != nil {
				return err
			}
		}
		if _, more := w[moreKeys]; !more {
			for k := range g {
				if _, ok := w[k]; !ok {
					return fmt.Errorf("%s: key %q, which the page does not show", path, k)
				}
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: %v, want an array of %d", path, got, len(w))
		}
		for i := range w {
			if err := sameShape(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if fmt.Sprint(shown) != fmt.Sprint(got) {
		return fmt.Errorf("%s: %v, the page shows %v", path, got, shown)
	}
	return nil
}

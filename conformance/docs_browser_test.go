package conformance

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/tail"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// chromiumFlags start Debian's Chromium headless on a machine without a display, a
// D-Bus session or a network: no sandbox (CI runs as root), no GPU, and none of the
// background connections (QUIC, component updates, sync) that a closed network refuses.
var chromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-dev-shm-usage",
}

// chromium returns the browser (EMBED_STACK_CHROMIUM, else chromium on the PATH), or
// skips the test (fails it when EMBED_STACK_REQUIRE_E2E=1: `make deps` and .ci/run
// install it).
func chromium(t *testing.T) string {
	t.Helper()
	if p := testenv.Get("EMBED_STACK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on the PATH (apt-get install chromium, or `make deps`)"
	if testenv.RequireE2E() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// dumpDOM loads url in headless Chromium and returns the DOM once the page's scripts
// have run: --virtual-time-budget lets the page's fetch of /openapi.json and its
// rendering finish before --dump-dom prints.
func dumpDOM(t *testing.T, url string) string {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(slices.Clone(chromiumFlags), "--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=15000", "--dump-dom", url)
	cmd := exec.CommandContext(c, chromium(t), args...)
	stderr := tail.New(16<<10, nil)
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\nstderr:\n%s", url, err, stderr.String())
	}
	return string(out)
}

// GET /docs in a real browser: the page fetches /openapi.json and draws every
// operation, with no script error, embeddings first, a table of contents linking each
// operation, and the document's `code` spans as <code> rather than backticks. (The page
// as it was before issue 27 fails here: Element.append returns undefined, and the page
// showed only "Could not load openapi.json: TypeError".)
func TestDocsPageInBrowser(t *testing.T) {
	s := defaultServer(t)
	var doc struct {
		Tags []struct {
			Name string `json:"name"`
		} `json:"tags"`
		Paths map[string]map[string]struct {
			OperationID string   `json:"operationId"`
			Tags        []string `json:"tags"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(s.do(t, http.MethodGet, "/openapi.json", nil, nil).body, &doc); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, item := range doc.Paths {
		for _, op := range item {
			ids = append(ids, op.OperationID)
		}
	}

	dom := dumpDOM(t, s.URL+"/docs")
	bodyTag := regexp.MustCompile(`<body[^>]*>`).FindString(dom)
	attr := func(name string) string {
		m := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(bodyTag)
		if m == nil {
			return ""
		}
		return m[1]
	}
	errorsBox := regexp.MustCompile(`(?s)<div id="errors"[^>]*>(.*?)</div>`).FindStringSubmatch(dom)
	if attr("data-state") != "rendered" || errorsBox == nil || errorsBox[1] != "" {
		t.Fatalf("the page did not render: body %s, errors box %q", bodyTag, errorsBox)
	}
	if n, _ := strconv.Atoi(attr("data-operations")); n != len(ids) {
		t.Errorf("the page drew %s operations; /openapi.json has %d", attr("data-operations"), len(ids))
	}

	// The rendered part: the table of contents and the operations, before the script.
	start, end := strings.Index(dom, `<nav id="toc"`), strings.Index(dom, "<script>")
	if start < 0 || end < start {
		t.Fatalf("no table of contents before the script in the DOM:\n%.2000s", dom)
	}
	rendered := dom[start:end]
	for _, id := range ids {
		if !strings.Contains(rendered, `id="`+id+`"`) {
			t.Errorf("operation %s not drawn", id)
		}
		if !strings.Contains(rendered, `href="#`+id+`"`) {
			t.Errorf("operation %s not in the table of contents", id)
		}
	}
	// Embeddings first, then the groups in the document's tag order.
	first := regexp.MustCompile(`<section class="op" id="([^"]+)"`).FindStringSubmatch(rendered)
	if first == nil || first[1] != "createEmbeddings" {
		t.Errorf("first operation %v, want createEmbeddings", first)
	}
	last := -1
	for _, tag := range doc.Tags {
		i := strings.Index(rendered, `<h2 id="tag-`+tag.Name+`"`)
		if i < 0 || i < last {
			t.Errorf("section %s missing or out of the document's tag order", tag.Name)
		}
		last = i
	}
	// Inline code: the document writes `--token-ids`; the page shows it as code.
	if strings.Contains(rendered, "`") {
		i := strings.Index(rendered, "`")
		t.Errorf("a backtick shows on the page: …%s…", rendered[max(0, i-80):min(len(rendered), i+80)])
	}
	if !strings.Contains(rendered, "<code>--token-ids</code>") {
		t.Error("no <code>--token-ids</code>: inline code is not rendered")
	}
}

package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	fenceRE   = regexp.MustCompile("(?ms)^```.*?^```[ \t]*$")
	codeRE    = regexp.MustCompile("`[^`\n]*`")
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	// anchorDropRE is what GitHub drops from a heading to make its anchor: everything but
	// letters, digits, spaces, hyphens and underscores.
	anchorDropRE = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// pages lists README.md and every Markdown page under docs/, relative to the root.
func pages(t *testing.T, root string) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// anchors returns the anchors GitHub gives a page's headings: the heading's text
// lowercased, with code marks and punctuation dropped and spaces made hyphens; a
// repeated one gets -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		h := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(m[1], "$1") // a link's text
		a := strings.ReplaceAll(anchorDropRE.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestInternalLinks: every link from README.md and the pages under docs/ to a file of
// the repository names one that exists, and every #anchor one of the target page's
// headings (as GitHub makes them). Links inside code are not links.
func TestInternalLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := cache[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cache[path] = anchors(string(b))
		return cache[path]
	}
	checked := 0
	for _, page := range pages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		text := codeRE.ReplaceAllString(fenceRE.ReplaceAllString(string(b), ""), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(link) {
				continue // http:, https:, mailto:
			}
			target, anchor, _ := strings.Cut(link, "#")
			path := filepath.Join(root, page)
			if target != "" {
				path = filepath.Join(filepath.Dir(path), filepath.FromSlash(target))
				if rel, err := filepath.Rel(root, path); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: link %s leaves the repository", page, link)
					continue
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %s: no such file", page, link)
					continue
				}
			}
			checked++
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s: link %s: an anchor into a file that is not Markdown", page, link)
				continue
			}
			if !anchorsOf(path)[anchor] {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s", page, link, filepath.Base(path), anchor)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d internal links found: the link pattern no longer matches the pages", checked)
	}
}

// The anchor rule, on headings the pages use.
func TestAnchors(t *testing.T) {
	a := anchors("# API reference\n## `GET /openapi.json` and `GET /docs`\n```\n# not a heading\n```\n## Several models\n## Several models\n### Behind a load balancer\n")
	for _, want := range []string{"api-reference", "get-openapijson-and-get-docs", "several-models", "several-models-1", "behind-a-load-balancer"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block made an anchor")
	}
}

package testenv

import (
	"flag"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/testrepo"
)

var update = flag.Bool("update", false, "rewrite the table of docs/testing.md from Vars")

const (
	docPath    = "docs/testing.md"
	tableBegin = "<!-- testenv index: written by `go test ./internal/testenv -update` from internal/testenv/vars.go -->\n"
	tableEnd   = "<!-- end of the testenv index -->\n"
)

// table renders Vars as docs/testing.md shows them.
func table() string {
	var b strings.Builder
	b.WriteString("| variable | set by | what it changes | read by |\n|---|---|---|---|\n")
	for _, v := range Vars() {
		b.WriteString("| `" + v.Name + "` | " + v.SetBy + " | " + v.Use + " | " + v.ReadBy + " |\n")
	}
	return b.String()
}

// TestIndexDocumented: docs/testing.md's table is Vars, row for row.
func TestIndexDocumented(t *testing.T) {
	path := filepath.Join(testrepo.RootOf(t), docPath)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the lines %q and %q around the table", docPath, tableBegin, tableEnd)
	}
	got, want := doc[i+len(tableBegin):j], table()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc[:i+len(tableBegin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the table of %s", docPath)
		return
	}
	t.Errorf("the table of %s is not internal/testenv's index; run go test ./internal/testenv -update\ngot:\n%s\nwant:\n%s", docPath, got, want)
}

// scanned returns the Go files that tests are made of: every _test.go file, and the
// packages that exist only for tests. internal/testenv itself is left out.
func scanned(t *testing.T) map[string]string {
	t.Helper()
	root := testrepo.RootOf(t)
	helpers := []string{"internal/e2e/", "internal/testrepo/", "hub/hubtest/", "telemetry/telemetrytest/"}
	files := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" || rel == "internal/testenv") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		if !strings.HasSuffix(rel, "_test.go") && !slices.ContainsFunc(helpers, func(h string) bool { return strings.HasPrefix(rel, h) }) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("only %d test files under %s: the walk is wrong", len(files), root)
	}
	return files
}

// TestOnlyThroughTestenv: no test reads the environment but through this package, so
// the index is complete. (Tests still pass os.Environ() on to the children they start.)
func TestOnlyThroughTestenv(t *testing.T) {
	reader := regexp.MustCompile(`\bos\.(Getenv|LookupEnv)\(`)
	for rel, src := range scanned(t) {
		for n, line := range strings.Split(src, "\n") {
			if reader.MatchString(line) {
				t.Errorf("%s:%d reads the environment directly; use internal/testenv (and index the variable): %s", rel, n+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestEveryVarIsRead: each variable of the index is named by some test, so the index
// holds nothing stale.
func TestEveryVarIsRead(t *testing.T) {
	files := scanned(t)
	own, err := os.ReadFile("testenv.go") // RequireE2E names its variable here
	if err != nil {
		t.Fatal(err)
	}
	files["internal/testenv/testenv.go"] = string(own)
	for _, v := range Vars() {
		quoted := `"` + v.Name + `"`
		if !slices.ContainsFunc(slices.Collect(maps.Values(files)), func(src string) bool { return strings.Contains(src, quoted) }) {
			t.Errorf("%s is in the index but no test names it: remove it from internal/testenv/vars.go", v.Name)
		}
	}
}

func TestGetRefusesAnUnindexedName(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "NOT_INDEXED_ANYWHERE is not in the index") {
			t.Errorf("Get of an unindexed name: panic %v", r)
		}
	}()
	Get("NOT_INDEXED_ANYWHERE")
}

func TestIntAndDuration(t *testing.T) {
	t.Setenv("EMBED_STACK_SCALE_CLIENTS", "")
	if got := Int(t, "EMBED_STACK_SCALE_CLIENTS", 6); got != 6 {
		t.Errorf("unset: %d, want the default 6", got)
	}
	t.Setenv("EMBED_STACK_SCALE_CLIENTS", "9")
	if got := Int(t, "EMBED_STACK_SCALE_CLIENTS", 6); got != 9 {
		t.Errorf("9: got %d", got)
	}
	t.Setenv("EMBED_STACK_SOAK", "90s")
	if got := Duration(t, "EMBED_STACK_SOAK", 0); got.Seconds() != 90 {
		t.Errorf("90s: got %v", got)
	}
}

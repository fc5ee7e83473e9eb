package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/testrepo"
)

// goPackages returns the module's package directories, relative to the root: every
// directory holding a .go file, less testdata, hidden folders, node_modules and
// nested modules (bench/peers/ollama has a go.mod of its own).
func goPackages(t *testing.T, root string) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return filepath.SkipDir
		}
		if gos, _ := filepath.Glob(filepath.Join(path, "*.go")); len(gos) > 0 {
			pkgs = append(pkgs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestArchitectureNamesEveryPackage: the package tables of architecture.md have a row
// for every Go package of the module, and none for a package that is gone, so that a
// reader finds what each one owns and must not know.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	root := testrepo.RootOf(t)
	raw, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_/.-]+)` \\|").FindAllStringSubmatch(string(raw), -1) {
		rows = append(rows, m[1])
	}
	pkgs := goPackages(t, root)
	if len(pkgs) < 30 {
		t.Fatalf("only %d packages under %s: the walk is wrong", len(pkgs), root)
	}
	for _, p := range pkgs {
		if !slices.Contains(rows, p) {
			t.Errorf("architecture.md has no row for package %s: say what it owns and what it must not know", p)
		}
	}
	for _, r := range rows {
		if !slices.Contains(pkgs, r) {
			t.Errorf("architecture.md has a row for %s, which is not a package of the module", r)
		}
	}
}

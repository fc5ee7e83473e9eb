package testrepo

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRoot: from this package's directory the root is two levels up, and it holds
// this very file under internal/testrepo.
func TestRoot(t *testing.T) {
	root := RootOf(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Dir(filepath.Dir(wd)); root != want {
		t.Errorf("Root = %s, want %s", root, want)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testrepo", "testrepo_test.go")); err != nil {
		t.Error(err)
	}
}

// TestRootOutsideAModule: with no go.mod above the working directory, Root says so.
func TestRootOutsideAModule(t *testing.T) {
	t.Chdir(t.TempDir())
	if dir, err := Root(); err == nil {
		t.Errorf("Root = %s outside any module; want an error", dir)
	}
}

// Package testrepo finds the repository from tests. go test runs each package's tests
// in that package's directory, so a test that reads the generated models, the corpus
// or the built binary has to find the repository root first.
package testrepo

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Root returns the directory holding go.mod, walking up from the working directory.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// RootOf is Root for a test, which it fails when there is no go.mod above.
func RootOf(tb testing.TB) string {
	tb.Helper()
	dir, err := Root()
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

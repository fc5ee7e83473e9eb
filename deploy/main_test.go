package deploy

import (
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestMain runs the tests with the weights the binary converts at load kept out of
// the user's cache (e2e.Main).
func TestMain(m *testing.M) { e2e.Main(m) }

// Package testenv is the one reader of the environment variables that tests read,
// and their index. A test reads the environment only through Get, Lookup, Int and
// Duration, which refuse a name the index lacks; TestOnlyThroughTestenv scans the
// repository's tests for any other reader, and TestIndexDocumented keeps the table in
// docs/testing.md equal to Vars. So the table lists every variable a test reads, what
// sets it and what it changes.
//
// Its name and role follow Go's own internal/testenv, which gates tests on their
// environment in one place. It refuses to know what the variables mean to the code
// under test: the product's own variables (EMBED_STACK_THREADS, OTEL_*, HF_*) are
// documented with the product (docs/configuration.md), and a test that sets them
// for a child it starts does not read them.
package testenv

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// Var is one environment variable that tests read.
type Var struct {
	Name string
	// Who sets it: "you" (to run or widen a test by hand), a make target, or, for a
	// helper process (os/exec's TestHelperProcess pattern), "a test, for its fake".
	SetBy string
	// Use says what it changes, its default included.
	Use string
	// ReadBy lists the packages whose tests read it.
	ReadBy string
}

var index = map[string]bool{}

func init() {
	for _, v := range vars {
		if index[v.Name] {
			panic("testenv: " + v.Name + " is in the index twice")
		}
		index[v.Name] = true
	}
}

// Vars returns the index, in the order of docs/testing.md's table.
func Vars() []Var { return append([]Var(nil), vars...) }

func check(name string) {
	if !index[name] {
		panic(fmt.Sprintf("testenv: %s is not in the index of test environment variables: add it to internal/testenv/vars.go and docs/testing.md (go test ./internal/testenv -update)", name))
	}
}

// Get returns the value of the indexed variable name ("" when unset).
func Get(name string) string {
	check(name)
	return os.Getenv(name)
}

// Lookup returns the value of the indexed variable name and whether it is set.
func Lookup(name string) (string, bool) {
	check(name)
	return os.LookupEnv(name)
}

// Int returns the indexed variable name as a positive integer, def when it is unset;
// any other value fails the test.
func Int(t testing.TB, name string, def int) int {
	t.Helper()
	v := Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// Duration returns the indexed variable name as a positive Go duration (30s, 10m),
// def when it is unset; any other value fails the test.
func Duration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := Get(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 30s or 10m", name, v)
	}
	return d
}

// RequireE2E reports whether EMBED_STACK_REQUIRE_E2E=1 (set by make test) says that
// every end-to-end test must run: a missing binary, model or tool is then a failure,
// not a skip.
func RequireE2E() bool { return Get("EMBED_STACK_REQUIRE_E2E") == "1" }

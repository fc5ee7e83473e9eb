package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/embed-stack/embed-stack/internal/flagconfig"
)

// configurationDoc renders docs/configuration.md from the flag definitions, so
// the reference cannot drift from the code (a test compares them).
func configurationDoc(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from the flag definitions by
     go test ./cmd/embed-stack -run TestConfigurationDocs -update
     Do not edit by hand. -->

Every setting of ` + "`embed-stack serve`" + ` can be given three ways. Precedence, highest
first: command-line flag, environment variable, config file, default.

- flag: ` + "`--max-inputs 100`" + `
- environment: ` + "`EMBED_STACK_MAX_INPUTS=100`" + ` (repeatable flags: comma-separated)
- config file (` + "`--config FILE`" + ` or ` + "`EMBED_STACK_CONFIG`" + `; TOML, YAML or JSON, by
  extension): ` + "`max_inputs = 100`" + ` (repeatable flags: an array)

` + "`embed-stack serve --print-config`" + ` prints the effective configuration, with each
value's source and secrets redacted, in a form ` + "`--config`" + ` accepts.

| flag | environment | file key | default | meaning |
|---|---|---|---|---|
`)
	fs.VisitAll(func(f *flag.Flag) {
		_, usage := flag.UnquoteUsage(f)
		def := f.DefValue
		switch {
		case def == "" || def == "[]":
			def = ""
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | `%s` | %s | %s |\n", f.Name, flagconfig.EnvName(f.Name),
			strings.ReplaceAll(f.Name, "-", "_"), def, strings.ReplaceAll(usage, "|", "\\|"))
	})
	return b.String()
}

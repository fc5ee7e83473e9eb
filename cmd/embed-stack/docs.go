package main

import "strings"

// configurationDoc renders docs/configuration.md from the flag tables of serve and
// embed, so that the reference cannot drift from the code (a test compares them).
func configurationDoc() string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from the flag definitions by
     go test ./cmd/embed-stack -run TestConfigurationDocs -update
     Do not edit by hand. -->

Every setting of ` + "`embed-stack serve`" + ` and ` + "`embed-stack embed`" + ` can be given three ways.
Precedence, highest first: command-line flag, environment variable, config file, default.

- flag: ` + "`--max-inputs 100`" + ` or ` + "`--max-inputs=100`" + `
- environment: ` + "`EMBED_STACK_MAX_INPUTS=100`" + ` (repeatable flags: comma-separated)
- config file (` + "`--config FILE`" + ` or ` + "`EMBED_STACK_CONFIG`" + `; TOML, YAML or JSON, by
  extension): ` + "`max_inputs = 100`" + ` (repeatable flags: an array)

The two commands share the names of what they share (` + "`--model`" + `, ` + "`--threads`" + `,
` + "`--device`" + `, …), so one environment or one file can configure both: each command takes
its own settings from a file and ignores the other's, and refuses a key that neither has.
A value must suit both, though: ` + "`embed`" + ` takes one model, so a file or ` + "`EMBED_STACK_MODEL`" + `
that names several (` + "`model = [\"e=…\", \"rr=…\"]`" + `, serve's ` + "`NAME=MODEL`" + ` form) configures
serve only.
` + "`--print-config`" + ` prints the effective configuration, with each value's source and
secrets redacted, in a form ` + "`--config`" + ` accepts. ` + "`--help`" + ` lists the flags in the
groups below. Flags are GNU-style (` + "`--name value`" + ` or ` + "`--name=value`" + `; the single-dash
` + "`-name`" + ` of earlier versions still works); a renamed flag keeps its former name, with a
warning (the "Former names" tables).

A command line that is not one (an unknown flag, a flag without its value) gets the
error, with the nearest flag's name for a typo, the synopsis and a pointer to ` + "`--help`" + `,
on stderr, and exit status 2. An error that stops a command once started (a model
that is missing or cannot be downloaded, a port in use) is one plain line on stderr,
` + "`embed-stack serve: …`" + `, and exit status 1; with ` + "`--log-format json`" + ` it is a log record
instead, ` + "`{\"level\":\"ERROR\",\"msg\":\"embed-stack serve failed\",\"error\":\"…\"}`" + `.

## embed-stack serve
`)
	newServeFlagSet(&serveFlags{}).Markdown(&b, "###")
	b.WriteString("\n## embed-stack embed\n")
	newEmbedFlagSet(&embedFlags{}).Markdown(&b, "###")
	return b.String()
}

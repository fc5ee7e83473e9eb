// Package flagconfig is the command line of every embed-stack command: one table of
// flags per command (Set), defined once and used for parsing, --help, --print-config
// and the generated docs/configuration.md. The flags are GNU-style (--max-inputs 100,
// --max-inputs=100; spf13/pflag parses them), and a command's flags are filled from
// three places, in this precedence: the command line, then an EMBED_STACK_*
// environment variable per flag (--max-inputs: EMBED_STACK_MAX_INPUTS), then the
// TOML, YAML or JSON file named by --config (max_inputs = 100), then the default.
//
// A renamed flag keeps its old name (Flag.Old) on the command line, in the
// environment and in files, with a warning. An unknown flag or file key is refused
// with the nearest names ("did you mean --model?").
//
// It knows no command's flags: the commands define theirs (cmd/embed-stack), and
// their values are read only in main.
package flagconfig

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Where a setting's value came from, for --print-config.
const (
	FromFlag    = "flag"
	FromEnv     = "env"
	FromFile    = "file"
	FromDefault = "default"
)

// EnvPrefix names every flag's environment variable: --max-inputs is
// EMBED_STACK_MAX_INPUTS.
const EnvPrefix = "EMBED_STACK_"

// ConfigFlag names the config file; it is itself settable by EMBED_STACK_CONFIG.
const ConfigFlag = "config"

// EnvName is the environment variable of a flag.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Key is a flag's key in a config file: --max-inputs is max_inputs.
func Key(flagName string) string { return strings.ReplaceAll(flagName, "-", "_") }

// Secret says whether a flag's value must be redacted when printed.
func Secret(name string) bool {
	return strings.Contains(name, "key") || strings.Contains(name, "token") && !strings.Contains(name, "tokens") && name != "token-ids"
}

// Set is one command's flags. Define them with the typed methods (String, Int, …)
// in the order --help shows them, under Group titles; then Parse. Not safe for
// concurrent use.
type Set struct {
	// Name is the command as typed, for messages: "embed-stack serve".
	Name string
	// Synopsis is the one-line usage: "embed-stack serve --model MODEL [flags]".
	Synopsis string
	// About is what --help says under the synopsis: what the command does.
	About string
	// Footer ends --help (where the details are documented).
	Footer string
	// Env reads the EMBED_STACK_* variables.
	Env bool
	// Args names the positional arguments the command takes ("REF..."); "" refuses any.
	Args string
	// Stderr, when set, receives Parse's warnings (former names in use).
	Stderr io.Writer
	// Shared are the config-file keys of the other commands: a file that several
	// commands read may hold them, and this command ignores them.
	Shared []string

	fs       *pflag.FlagSet
	flags    []*Flag
	lookup   map[string]*Flag // by every name, old ones included
	group    string
	sources  map[string]string
	warnings []string
}

// Flag is one row of the table: its name, placeholder, help and checks.
type Flag struct {
	Name string
	// Arg is the value's placeholder in --help (MODEL, N, DURATION); "" for a boolean.
	Arg string
	// Help is --help's line; More adds what only docs/configuration.md shows.
	Help, more string
	Group      string
	old, also  []string
	def        string // the default, as --help and the docs show it
	value      pflag.Value
	min, max   int64
	hasMin     bool
	hasMax     bool
	hidden     bool
	set        *Set
}

// New returns an empty Set for the command name.
func New(name, synopsis, about string) *Set {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned and worded here
	fs.Usage = func() {}
	fs.SortFlags = false
	return &Set{Name: name, Synopsis: synopsis, About: about, fs: fs, lookup: map[string]*Flag{}}
}

// Group titles the flags defined after it in --help and the docs.
func (s *Set) Group(title string) { s.group = title }

func (s *Set) define(v pflag.Value, name, arg, help string) *Flag {
	f := &Flag{Name: name, Arg: arg, Help: help, Group: s.group, value: v, def: v.String(), set: s}
	if _, ok := v.(boolValue); ok {
		f.Arg = ""
	}
	s.add(f, name, false)
	s.flags = append(s.flags, f)
	return f
}

// add registers name for f with pflag.
func (s *Set) add(f *Flag, name string, hidden bool) {
	if s.lookup[name] != nil {
		panic("flagconfig: flag --" + name + " defined twice")
	}
	pf := s.fs.VarPF(f.value, name, "", f.Help)
	if _, ok := f.value.(boolValue); ok {
		pf.NoOptDefVal = "true"
	}
	pf.Hidden = hidden
	s.lookup[name] = f
}

// String defines a text flag.
func (s *Set) String(p *string, name, arg, def, help string) *Flag {
	*p = def
	return s.define(stringValue{p}, name, or(arg, "TEXT"), help)
}

// Int defines an integer flag.
func (s *Set) Int(p *int, name, arg string, def int, help string) *Flag {
	*p = def
	return s.define(intValue{p}, name, or(arg, "N"), help)
}

// Int64 defines a 64-bit integer flag.
func (s *Set) Int64(p *int64, name, arg string, def int64, help string) *Flag {
	*p = def
	return s.define(int64Value{p}, name, or(arg, "N"), help)
}

// Float defines a number flag.
func (s *Set) Float(p *float64, name, arg string, def float64, help string) *Flag {
	*p = def
	return s.define(floatValue{p}, name, or(arg, "X"), help)
}

// Bool defines a switch: --name sets it, --name=false clears it.
func (s *Set) Bool(p *bool, name string, def bool, help string) *Flag {
	*p = def
	return s.define(boolValue{p}, name, "", help)
}

// Duration defines a duration flag (500ms, 30s, 5m, 1h).
func (s *Set) Duration(p *time.Duration, name, arg string, def time.Duration, help string) *Flag {
	*p = def
	return s.define(durationValue{p}, name, or(arg, "DURATION"), help)
}

// List defines a repeatable flag: each occurrence adds a value.
func (s *Set) List(p *[]string, name, arg, help string) *Flag {
	return s.define(listValue{p}, name, or(arg, "VALUE"), help)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// More adds detail that docs/configuration.md shows after the help.
func (f *Flag) More(text string) *Flag { f.more = text; return f }

// Old keeps former names of the flag working, on the command line, in the
// environment and in config files, each use with a warning; --help shows only the
// new name.
func (f *Flag) Old(names ...string) *Flag {
	for _, n := range names {
		f.set.add(f, n, true)
		f.old = append(f.old, n)
	}
	return f
}

// Also names words a user may type for this flag (--port for --addr): an unknown
// flag of that name suggests this one.
func (f *Flag) Also(words ...string) *Flag { f.also = append(f.also, words...); return f }

// AtLeast refuses a value below n (a duration in nanoseconds: 1 means positive).
func (f *Flag) AtLeast(n int64) *Flag { f.min, f.hasMin = n, true; return f }

// AtMost refuses a value above n.
func (f *Flag) AtMost(n int64) *Flag { f.max, f.hasMax = n, true; return f }

// Hide leaves the flag out of --help, --print-config and the docs.
func (f *Flag) Hide() *Flag {
	f.hidden = true
	f.set.fs.Lookup(f.Name).Hidden = true
	return f
}

// Parse reads args, then fills every flag the command line left unset from its
// EMBED_STACK_* variable (when Env), then from the --config file: flag > env > file
// > default; then applies the bounds. getenv may be nil when Env is false.
//
// Errors: ErrHelp for -h or --help (print Help); a *UsageError for a command line
// that is not one (an unknown flag, a missing value, a stray argument), to be shown
// with the synopsis; otherwise an error naming the flag and the place of the value.
func (s *Set) Parse(args []string, getenv func(string) string) error {
	s.sources, s.warnings = map[string]string{}, nil
	if err := s.fs.Parse(s.normalize(args)); err != nil {
		return s.parseError(err)
	}
	if s.Args == "" && s.fs.NArg() > 0 {
		return s.usageError(fmt.Sprintf("unexpected argument %q (flags start with --)", s.fs.Arg(0)))
	}
	for _, f := range s.flags {
		s.sources[f.Name] = FromDefault
	}
	s.fs.Visit(func(pf *pflag.Flag) {
		f := s.lookup[pf.Name]
		s.sources[f.Name] = FromFlag
		if pf.Name != f.Name {
			s.warn("--%s is now --%s; the old name still works", pf.Name, f.Name)
		}
	})
	if s.Env && getenv != nil {
		if err := s.fromEnv(getenv); err != nil {
			return err
		}
	}
	if err := s.fromFile(); err != nil {
		return err
	}
	return s.check()
}

// normalize turns Go-style -name into --name for the flags of the set, so that
// command lines written for the flag package keep working.
func (s *Set) normalize(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && s.lookup[name] != nil {
			a = "-" + a
		}
		out[i] = a
	}
	return out
}

func (s *Set) warn(format string, a ...any) {
	w := fmt.Sprintf(format, a...)
	s.warnings = append(s.warnings, w)
	if s.Stderr != nil {
		fmt.Fprintf(s.Stderr, "%s: warning: %s\n", s.Name, w)
	}
}

// Warnings are what the last Parse found worth saying without refusing: former
// names in use.
func (s *Set) Warnings() []string { return s.warnings }

// PositionalArgs are the arguments that are not flags.
func (s *Set) PositionalArgs() []string { return s.fs.Args() }

// Source says where the named flag's value came from (FromFlag, …).
func (s *Set) Source(name string) string { return s.sources[name] }

// Set sets a flag as the command line would, without changing its source.
func (s *Set) Set(name, value string) error {
	f := s.lookup[name]
	if f == nil {
		return fmt.Errorf("flagconfig: no flag --%s", name)
	}
	return f.value.Set(value)
}

// Names are the canonical names of the flags, hidden ones included.
func (s *Set) Names() []string {
	out := make([]string, 0, len(s.flags))
	for _, f := range s.flags {
		out = append(out, f.Name)
	}
	return out
}

// check applies the bounds, naming where a refused value came from.
func (s *Set) check() error {
	for _, f := range s.flags {
		v, ok := f.value.(numeric)
		if !ok || !f.hasMin && !f.hasMax {
			continue
		}
		n := v.number()
		if f.hasMin && n >= f.min && (!f.hasMax || n <= f.max) || !f.hasMin && n <= f.max {
			continue
		}
		var rule string
		_, duration := f.value.(durationValue)
		switch {
		case f.hasMin && f.hasMax:
			rule = fmt.Sprintf("must be %s to %s", v.show(f.min), v.show(f.max))
		case !f.hasMin:
			rule = "must be at most " + v.show(f.max)
		case f.min == 0:
			rule = "must not be negative"
		case f.min == 1 && duration:
			rule = "must be positive"
		default:
			rule = "must be at least " + v.show(f.min)
		}
		from := ""
		switch s.sources[f.Name] {
		case FromEnv:
			from = " (from " + EnvName(f.Name) + ")"
		case FromFile:
			from = " (from the config file)"
		}
		return fmt.Errorf("--%s %s; got %s%s", f.Name, rule, v.show(n), from)
	}
	return nil
}

// Print writes the effective configuration as TOML that --config accepts, a line a
// flag in name order, each annotated with its source; secrets are redacted.
func (s *Set) Print(w io.Writer) {
	flags := slices.Clone(s.flags)
	slices.SortFunc(flags, func(a, b *Flag) int { return strings.Compare(a.Name, b.Name) })
	for _, f := range flags {
		if f.hidden || f.Name == "print-config" || f.Name == ConfigFlag {
			continue
		}
		value := tomlValue(f.value)
		if Secret(f.Name) && f.value.String() != "" {
			value = `"<redacted>"`
		}
		fmt.Fprintf(w, "%-22s = %-40s # %s\n", Key(f.Name), value, s.sources[f.Name])
	}
}

func tomlValue(v pflag.Value) string {
	switch x := v.(type) {
	case listValue:
		quoted := make([]string, len(*x.p))
		for i, s := range *x.p {
			quoted[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	case boolValue, intValue, int64Value, floatValue:
		return v.String()
	}
	return strconv.Quote(v.String())
}

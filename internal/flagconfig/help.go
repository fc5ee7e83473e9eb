package flagconfig

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// ErrHelp is what Parse's error for -h and --help Is (a *HelpError): Report
// prints the help.
var ErrHelp = pflag.ErrHelp

// HelpError is Parse's error for -h and --help.
type HelpError struct{ set *Set }

func (e *HelpError) Error() string        { return "help requested" }
func (e *HelpError) Is(target error) bool { return target == ErrHelp }

// Report tells the user why a command line runs nothing, and returns the exit
// status: for -h or --help the help on stdout, and 0; for a *UsageError the message
// and the synopsis on stderr, and 2; for any other error "COMMAND: error" on
// stderr, and 2.
func Report(err error, command string, stdout, stderr io.Writer) int {
	var (
		help  *HelpError
		usage *UsageError
	)
	switch {
	case errors.As(err, &help):
		help.set.Help(stdout)
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "%s: %s\n%s", usage.Command, usage.Msg, usage.Usage())
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", command, err)
	return 2
}

// UsageError is a command line that is not one: an unknown flag, a flag without
// its value, a stray argument. Show it with the synopsis, not with every flag: a
// typo's message must not scroll away behind a hundred lines of help.
type UsageError struct {
	Msg      string
	Synopsis string
	// Command is the command as typed, for the pointer to --help.
	Command string
}

func (e *UsageError) Error() string { return e.Msg }

// Usage is the two lines that follow the message.
func (e *UsageError) Usage() string {
	return fmt.Sprintf("Usage: %s\nRun '%s --help' for every flag.\n", e.Synopsis, e.Command)
}

func (s *Set) usageError(msg string) error {
	return &UsageError{Msg: msg, Synopsis: s.Synopsis, Command: s.Name}
}

// parseError words pflag's errors.
func (s *Set) parseError(err error) error {
	var (
		ne *pflag.NotExistError
		ve *pflag.InvalidValueError
		re *pflag.ValueRequiredError
	)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return &HelpError{s}
	case errors.As(err, &ne):
		name, dashes := ne.GetSpecifiedName(), "--"
		if short := ne.GetSpecifiedShortnames(); short != "" {
			name, dashes = short, "-"
		}
		msg := "unknown flag " + dashes + name
		if sug := s.suggest(name, func(n string) string { return "--" + n }); sug != "" {
			msg += "; did you mean " + sug + "?"
		}
		return s.usageError(msg)
	case errors.As(err, &ve):
		return fmt.Errorf("--%s %q: %v", s.lookup[ve.GetFlag().Name].Name, ve.GetValue(), errors.Unwrap(ve))
	case errors.As(err, &re):
		f := s.lookup[re.GetFlag().Name]
		return s.usageError(fmt.Sprintf("--%s needs a value: --%s %s", re.GetSpecifiedName(), f.Name, f.Arg))
	}
	return s.usageError(err.Error())
}

// suggest names the flags nearest to typed, written by show (--name or file_key),
// for "did you mean": up to three, nearest first; "" when none is near.
func (s *Set) suggest(typed string, show func(string) string) string {
	var names []string
	for _, f := range s.flags {
		if !f.hidden {
			names = append(names, f.Name)
		}
	}
	near := Suggest(typed, names)
	for _, f := range s.flags {
		if slices.Contains(f.also, typed) && !slices.Contains(near, f.Name) {
			near = append([]string{f.Name}, near...)
		}
		for _, o := range f.old {
			if o == typed || Distance(typed, o) == 1 && !slices.Contains(near, f.Name) {
				near = append(near, f.Name)
			}
		}
	}
	if len(near) > 3 {
		near = near[:3]
	}
	for i, n := range near {
		near[i] = show(n)
	}
	switch len(near) {
	case 0:
		return ""
	case 1:
		return near[0]
	}
	return strings.Join(near[:len(near)-1], ", ") + " or " + near[len(near)-1]
}

// Suggest returns the names near typed, nearest first: those within a small edit
// distance (a typo), and those typed begins (a name cut short).
func Suggest(typed string, names []string) []string {
	limit := max(1, min(2, len(typed)/3))
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	for _, n := range names {
		d := Distance(typed, n)
		switch {
		case d <= limit:
		case len(typed) >= 3 && strings.HasPrefix(n, typed):
			d = limit + 1
		default:
			continue
		}
		cs = append(cs, cand{n, d})
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return a.d - b.d })
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return out
}

// Distance is the optimal string alignment distance of a and b: insertions,
// deletions, substitutions and swaps of two neighbours count one each.
func Distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Layout of --help: the flag column, at most maxNameWidth wide (a longer flag has
// its help on the next line), then the help wrapped at helpWidth.
const (
	helpWidth    = 80
	maxNameWidth = 24
)

// spelling is how --help writes a flag: --name ARG.
func (f *Flag) spelling() string {
	if f.Arg == "" {
		return "--" + f.Name
	}
	return "--" + f.Name + " " + f.Arg
}

// Help writes --help: the synopsis, what the command does, and the flags in their
// groups, each with its placeholder and its default.
func (s *Set) Help(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n", s.Synopsis)
	if s.About != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(s.About, "\n"))
	}
	nameWidth := 0
	for _, f := range s.flags {
		if n := len(f.spelling()); !f.hidden && n <= maxNameWidth {
			nameWidth = max(nameWidth, n)
		}
	}
	group := "\x00"
	for _, f := range s.flags {
		if f.hidden {
			continue
		}
		if f.Group != group {
			group = f.Group
			fmt.Fprintf(w, "\n%s:\n", or(group, "Flags"))
		}
		name := f.spelling()
		lines := wrap(f.helpLine(), helpWidth-nameWidth-4)
		if len(name) > nameWidth {
			fmt.Fprintf(w, "  %s\n", name)
		} else {
			fmt.Fprintf(w, "  %-*s  %s\n", nameWidth, name, lines[0])
			lines = lines[1:]
		}
		for _, l := range lines {
			fmt.Fprintf(w, "%*s%s\n", nameWidth+4, "", l)
		}
	}
	if note := s.envNote(); note != "" || s.Footer != "" {
		fmt.Fprintf(w, "\n%s", note)
		if s.Footer != "" {
			fmt.Fprintln(w, strings.TrimRight(s.Footer, "\n"))
		}
	}
}

// envNote says how the flags map to variables and file keys, with one of the set's
// own flags as the example.
func (s *Set) envNote() string {
	if !s.Env || len(s.flags) == 0 {
		return ""
	}
	ex := s.flags[0]
	for _, f := range s.flags {
		if _, ok := f.value.(intValue); ok && !f.hidden {
			ex = f
			break
		}
	}
	note := fmt.Sprintf("Every flag is also an environment variable (--%s: %s)", ex.Name, EnvName(ex.Name))
	if s.lookup[ConfigFlag] != nil {
		note += fmt.Sprintf(",\nand a key of the --config file (%s); a flag wins over both", Key(ex.Name))
	}
	return note + ".\n"
}

// helpLine is the help with its default: "(default X)", or "; default X" inside a
// closing parenthesis, left out where the default is zero or empty (the help says
// what zero means).
func (f *Flag) helpLine() string {
	note := "default " + f.def
	switch f.def {
	case "", "0", "0s", "false":
		return f.Help
	case "true":
		note = fmt.Sprintf("on by default; --%s=false turns it off", f.Name)
	}
	if strings.HasSuffix(f.Help, ")") {
		return strings.TrimSuffix(f.Help, ")") + "; " + note + ")"
	}
	return f.Help + " (" + note + ")"
}

// wrap breaks text into lines of at most width bytes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

// Markdown writes the flags as docs/configuration.md shows them: a table per group
// (flag, environment variable, file key, default, meaning), then the former names.
// heading is the groups' Markdown heading prefix ("###").
func (s *Set) Markdown(w io.Writer, heading string) {
	group := "\x00"
	var renamed []string
	for _, f := range s.flags {
		if f.hidden {
			continue
		}
		if f.Group != group {
			group = f.Group
			fmt.Fprintf(w, "\n%s %s\n\n| flag | environment | file key | default | meaning |\n|---|---|---|---|---|\n", heading, or(group, "Flags"))
		}
		def := ""
		if f.def != "" {
			def = "`" + f.def + "`"
		}
		meaning := f.Help
		if f.more != "" {
			meaning = strings.TrimSuffix(meaning, ".") + ". " + f.more
		}
		fmt.Fprintf(w, "| `--%s` | `%s` | `%s` | %s | %s |\n", f.Name, EnvName(f.Name), Key(f.Name), def, strings.ReplaceAll(meaning, "|", "\\|"))
		for _, o := range f.old {
			renamed = append(renamed, fmt.Sprintf("| `--%s` (`%s`, `%s`) | `--%s` |\n", o, EnvName(o), Key(o), f.Name))
		}
	}
	if len(renamed) > 0 {
		fmt.Fprintf(w, "\n%s Former names\n\nStill accepted, with a warning, on the command line, in the environment and in files:\n\n| former name | now |\n|---|---|\n%s", heading, strings.Join(renamed, ""))
	}
}

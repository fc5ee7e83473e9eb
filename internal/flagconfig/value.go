package flagconfig

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// The flag values. Each is a pflag.Value whose Set error finishes a sentence that
// names the flag and the value ("--max-inputs \"many\": not a whole number"), the
// same whether the value came from the command line, the environment or a file.

type stringValue struct{ p *string }

func (v stringValue) String() string     { return *v.p }
func (v stringValue) Set(s string) error { *v.p = s; return nil }
func (stringValue) Type() string         { return "string" }

type intValue struct{ p *int }

func (v intValue) String() string { return strconv.Itoa(*v.p) }
func (v intValue) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, strconv.IntSize)
	if err != nil {
		return errNumber
	}
	*v.p = int(n)
	return nil
}
func (intValue) Type() string          { return "int" }
func (v intValue) number() int64       { return int64(*v.p) }
func (v intValue) show(n int64) string { return strconv.FormatInt(n, 10) }

type int64Value struct{ p *int64 }

func (v int64Value) String() string { return strconv.FormatInt(*v.p, 10) }
func (v int64Value) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return errNumber
	}
	*v.p = n
	return nil
}
func (int64Value) Type() string          { return "int64" }
func (v int64Value) number() int64       { return *v.p }
func (v int64Value) show(n int64) string { return strconv.FormatInt(n, 10) }

var errNumber = errors.New("not a whole number")

type floatValue struct{ p *float64 }

func (v floatValue) String() string { return strconv.FormatFloat(*v.p, 'g', -1, 64) }
func (v floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return errors.New("not a number")
	}
	*v.p = f
	return nil
}
func (floatValue) Type() string { return "float64" }

type boolValue struct{ p *bool }

func (v boolValue) String() string { return strconv.FormatBool(*v.p) }
func (v boolValue) Set(s string) error {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return errors.New("not true or false")
	}
	*v.p = b
	return nil
}
func (boolValue) Type() string     { return "bool" }
func (boolValue) IsBoolFlag() bool { return true }

type durationValue struct{ p *time.Duration }

func (v durationValue) String() string { return FormatDuration(*v.p) }
func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return errors.New("not a duration such as 500ms, 30s or 5m")
	}
	*v.p = d
	return nil
}
func (durationValue) Type() string          { return "duration" }
func (v durationValue) number() int64       { return int64(*v.p) }
func (v durationValue) show(n int64) string { return FormatDuration(time.Duration(n)) }

// listValue is a repeatable flag: each occurrence adds a value; an environment
// variable holds them comma-separated, a config file as an array.
type listValue struct{ p *[]string }

func (v listValue) String() string     { return strings.Join(*v.p, ",") }
func (v listValue) Set(s string) error { *v.p = append(*v.p, s); return nil }
func (listValue) Type() string         { return "list" }

// numeric is a value that AtLeast and AtMost bound.
type numeric interface {
	number() int64
	show(int64) string
}

// FormatDuration writes d as a person would: 10m rather than Go's 10m0s, 0 as 0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

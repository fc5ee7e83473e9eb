// Package flagconfig fills a command's flag.FlagSet from three places, in this
// precedence: the command line, then an EMBED_STACK_* environment variable per flag
// (--max-inputs: EMBED_STACK_MAX_INPUTS), then a TOML, YAML or JSON file named by
// --config (max_inputs = 100), then the flag's default; and prints the effective
// configuration, with each value's source and the secrets redacted, as a file that
// --config reads back.
//
// It defines no flag but --config's name: the commands define theirs, and their
// values are read only in main (docs/configuration.md is generated from serve's).
package flagconfig

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"gopkg.in/yaml.v3"
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

// Secret says whether a flag's value must be redacted when printed.
func Secret(name string) bool {
	return strings.Contains(name, "key") || strings.Contains(name, "token") && !strings.Contains(name, "tokens") && name != "token-ids"
}

// Repeatable is implemented by flags that take several values (--model-alias):
// an environment variable holds them comma-separated, a config file as an array.
// StringList is the one.
type Repeatable interface{ repeatable() }

// StringList is a repeatable flag: each occurrence adds a value.
type StringList []string

func (s *StringList) String() string     { return strings.Join(*s, ",") }
func (s *StringList) Set(v string) error { *s = append(*s, v); return nil }
func (*StringList) repeatable()          {}

// Configure parses args, then fills every flag the command line left unset from
// its EMBED_STACK_* environment variable, then from the config file (--config):
// flag > env > file > default. It returns where each flag's value came from.
// Invalid values are refused with the variable or file that held them.
func Configure(fs *flag.FlagSet, args []string, getenv func(string) string) (map[string]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	sources := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { sources[f.Name] = FromDefault })
	fs.Visit(func(f *flag.Flag) { sources[f.Name] = FromFlag })

	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || sources[f.Name] != FromDefault {
			return
		}
		v := getenv(EnvName(f.Name))
		if v == "" {
			return
		}
		values := []string{v}
		if _, ok := f.Value.(Repeatable); ok {
			values = strings.Split(v, ",")
		}
		for _, s := range values {
			if e := fs.Set(f.Name, strings.TrimSpace(s)); e != nil {
				err = fmt.Errorf("%s=%q: %v", EnvName(f.Name), v, e)
				return
			}
		}
		sources[f.Name] = FromEnv
	})
	if err != nil {
		return nil, err
	}

	cf := fs.Lookup(ConfigFlag)
	if cf == nil || cf.Value.String() == "" {
		return sources, nil
	}
	path := cf.Value.String()
	settings, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		name := strings.ReplaceAll(key, "_", "-")
		f := fs.Lookup(name)
		if f == nil || name == ConfigFlag {
			return nil, fmt.Errorf("config file %s: unknown setting %q (the settings are the flags of --help, without the dashes)", path, key)
		}
		if sources[name] != FromDefault {
			continue // the command line or the environment wins
		}
		values, err := settingValues(settings[key])
		if err != nil {
			return nil, fmt.Errorf("config file %s: %s: %v", path, key, err)
		}
		if _, ok := f.Value.(Repeatable); !ok && len(values) != 1 {
			return nil, fmt.Errorf("config file %s: %s takes one value, not a list", path, key)
		}
		for _, v := range values {
			if err := fs.Set(name, v); err != nil {
				return nil, fmt.Errorf("config file %s: %s = %q: %v", path, key, v, err)
			}
		}
		sources[name] = FromFile
	}
	return sources, nil
}

// readConfigFile reads a TOML, YAML or JSON file (by extension) of flag settings.
func readConfigFile(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	settings := map[string]any{}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".toml":
		err = toml.Unmarshal(data, &settings)
	case ".yaml", ".yml":
		err = yaml.Unmarshal(data, &settings)
	case ".json":
		err = json.Unmarshal(data, &settings)
	default:
		return nil, fmt.Errorf("config file %s: unknown format %q; use .toml, .yaml or .json", path, ext)
	}
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return settings, nil
}

// settingValues turns one config value into the strings flag.Set takes.
func settingValues(v any) ([]string, error) {
	switch x := v.(type) {
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, err := scalarString(e)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	default:
		s, err := scalarString(v)
		if err != nil {
			return nil, err
		}
		return []string{s}, nil
	}
}

func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), nil
	case json.Number:
		return x.String(), nil
	}
	return "", fmt.Errorf("value %v is not a string, number or boolean", v)
}

// Print writes the effective configuration as TOML that --config accepts,
// each line annotated with its source; secrets are redacted.
func Print(w io.Writer, fs *flag.FlagSet, sources map[string]string) {
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "print-config" || f.Name == ConfigFlag {
			return
		}
		key := strings.ReplaceAll(f.Name, "-", "_")
		var value string
		switch {
		case Secret(f.Name) && f.Value.String() != "":
			value = `"<redacted>"`
		default:
			value = tomlValue(f)
		}
		fmt.Fprintf(w, "%-22s = %-40s # %s\n", key, value, sources[f.Name])
	})
}

func tomlValue(f *flag.Flag) string {
	if l, ok := f.Value.(*StringList); ok {
		quoted := make([]string, len(*l))
		for i, s := range *l {
			quoted[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	}
	if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
		return f.Value.String()
	}
	s := f.Value.String()
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return s
	}
	return strconv.Quote(s)
}

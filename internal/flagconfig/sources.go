package flagconfig

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"gopkg.in/yaml.v3"
)

// The sources below the command line: Parse reads the flags given, then fromEnv,
// then fromFile, each setting only what no earlier source set.

// fromEnv sets each flag still at its default from its EMBED_STACK_* variable (or
// an old name's, with a warning); a list's variable is comma-separated.
func (s *Set) fromEnv(getenv func(string) string) error {
	for _, f := range s.flags {
		if s.sources[f.Name] != FromDefault {
			continue
		}
		for _, name := range append([]string{f.Name}, f.old...) {
			v := getenv(EnvName(name))
			if v == "" {
				continue
			}
			if name != f.Name {
				s.warn("%s is now %s; the old name still works", EnvName(name), EnvName(f.Name))
			}
			values := []string{v}
			if _, ok := f.value.(listValue); ok {
				values = strings.Split(v, ",")
			}
			for _, x := range values {
				if err := f.value.Set(strings.TrimSpace(x)); err != nil {
					return fmt.Errorf("%s=%q: %v", EnvName(name), v, err)
				}
			}
			s.sources[f.Name] = FromEnv
			break
		}
	}
	return nil
}

// fromFile sets each flag still at its default from the --config file's key.
func (s *Set) fromFile() error {
	cf := s.lookup[ConfigFlag]
	if cf == nil || cf.value.String() == "" {
		return nil
	}
	path := cf.value.String()
	settings, err := readConfigFile(path)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		name := strings.ReplaceAll(key, "_", "-")
		f := s.lookup[name]
		switch {
		case f == nil && slices.Contains(s.Shared, name):
			continue // another command's setting
		case f == nil || name == ConfigFlag:
			hint := ""
			if sug := s.suggest(name, Key); sug != "" {
				hint = "did you mean " + sug + "? "
			}
			return fmt.Errorf("config file %s: unknown setting %q (%sthe settings are the flags of --help, without the dashes)", path, key, hint)
		case name != f.Name:
			s.warn("config file %s: %s is now %s; the old name still works", path, key, Key(f.Name))
		}
		if s.sources[f.Name] != FromDefault {
			continue // the command line or the environment wins
		}
		values, err := settingValues(settings[key])
		if err != nil {
			return fmt.Errorf("config file %s: %s: %v", path, key, err)
		}
		if _, ok := f.value.(listValue); !ok && len(values) != 1 {
			return fmt.Errorf("config file %s: %s takes one value, not a list", path, key)
		}
		for _, v := range values {
			if err := f.value.Set(v); err != nil {
				return fmt.Errorf("config file %s: %s = %q: %v", path, key, v, err)
			}
		}
		s.sources[f.Name] = FromFile
	}
	return nil
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

// settingValues turns one config value into the strings a flag's Set takes.
func settingValues(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		switch x := e.(type) {
		case string:
			out = append(out, x)
		case bool, int, int64, uint64, float64:
			out = append(out, fmt.Sprint(x))
		case json.Number:
			out = append(out, x.String())
		default:
			return nil, fmt.Errorf("value %v is not a string, number or boolean", e)
		}
	}
	return out, nil
}

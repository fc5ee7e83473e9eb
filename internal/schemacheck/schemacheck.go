// Package schemacheck validates JSON values against the schemas of an OpenAPI 3.1
// document, for the tests that keep server/openapi.json and the handlers in step.
// It covers the subset the document uses (type, const, enum, properties, required,
// additionalProperties, items, oneOf, anyOf, $ref to components, numeric and size
// bounds) and records which properties it saw, so that a test can also fail on a
// documented field no answer ever carries.
//
// It is not a general JSON Schema validator; the schemathesis run of `make test`
// checks the real binary with one.
package schemacheck

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Doc is a parsed OpenAPI document. Not safe for concurrent use (Seen is shared).
type Doc struct {
	Root map[string]any
	// Seen holds "Schema.property" for every property validated in an object
	// described by a named schema.
	Seen map[string]bool
}

// Parse reads an OpenAPI document.
func Parse(raw []byte) (*Doc, error) {
	var root map[string]any
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, err
	}
	return &Doc{Root: root, Seen: map[string]bool{}}, nil
}

// Schema returns the component schema called name.
func (d *Doc) Schema(name string) map[string]any {
	s, _ := d.lookup("#/components/schemas/" + name).(map[string]any)
	return s
}

// Properties returns the property names of a component schema, sorted.
func (d *Doc) Properties(name string) []string {
	props, _ := d.Schema(name)["properties"].(map[string]any)
	out := make([]string, 0, len(props))
	for k := range props {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (d *Doc) lookup(ref string) any {
	var cur any = d.Root
	for _, k := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// Validate checks raw JSON against the component schema called name.
func (d *Doc) Validate(name string, raw []byte) error {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return d.check(map[string]any{"$ref": "#/components/schemas/" + name}, v, "$", "")
}

// check validates v against s at path; owner is the named schema s came from.
func (d *Doc) check(s map[string]any, v any, path, owner string) error {
	if ref, ok := s["$ref"].(string); ok {
		target, ok := d.lookup(ref).(map[string]any)
		if !ok {
			return fmt.Errorf("%s: unresolved $ref %s", path, ref)
		}
		return d.check(target, v, path, ref[strings.LastIndex(ref, "/")+1:])
	}
	if c, ok := s["const"]; ok && !equal(c, v) {
		return fmt.Errorf("%s: %v is not the constant %v", path, v, c)
	}
	if e, ok := s["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return equal(x, v) }) {
		return fmt.Errorf("%s: %v is not one of %v", path, v, e)
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		alts, ok := s[key].([]any)
		if !ok {
			continue
		}
		matched := 0
		var errs []string
		for _, a := range alts {
			// Each alternative is tried on a scratch Seen set, kept only on a match.
			saved := d.Seen
			d.Seen = map[string]bool{}
			err := d.check(a.(map[string]any), v, path, owner)
			scratch := d.Seen
			d.Seen = saved
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			matched++
			for k := range scratch {
				d.Seen[k] = true
			}
		}
		if matched == 0 || (key == "oneOf" && matched > 1) {
			return fmt.Errorf("%s: %d alternatives of %s match (%s)", path, matched, key, strings.Join(errs, "; "))
		}
	}
	if t, ok := s["type"]; ok && !typeMatches(t, v) {
		return fmt.Errorf("%s: %s is not of type %v", path, kind(v), t)
	}
	switch x := v.(type) {
	case map[string]any:
		return d.checkObject(s, x, path, owner)
	case []any:
		if n, ok := s["minItems"].(float64); ok && float64(len(x)) < n {
			return fmt.Errorf("%s: %d items, fewer than %v", path, len(x), n)
		}
		if n, ok := s["maxItems"].(float64); ok && float64(len(x)) > n {
			return fmt.Errorf("%s: %d items, more than %v", path, len(x), n)
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range x {
				if err := d.check(items, e, fmt.Sprintf("%s[%d]", path, i), owner); err != nil {
					return err
				}
			}
		}
	case json.Number:
		f, _ := x.Float64()
		if n, ok := s["minimum"].(float64); ok && f < n {
			return fmt.Errorf("%s: %v is less than the minimum %v", path, f, n)
		}
		if n, ok := s["maximum"].(float64); ok && f > n {
			return fmt.Errorf("%s: %v is more than the maximum %v", path, f, n)
		}
	case string:
		if n, ok := s["minLength"].(float64); ok && float64(len([]rune(x))) < n {
			return fmt.Errorf("%s: %q is shorter than %v", path, x, n)
		}
	}
	return nil
}

func (d *Doc) checkObject(s map[string]any, x map[string]any, path, owner string) error {
	props, _ := s["properties"].(map[string]any)
	for _, r := range asSlice(s["required"]) {
		if _, ok := x[r.(string)]; !ok {
			return fmt.Errorf("%s: lacks required %q", path, r)
		}
	}
	keys := make([]string, 0, len(x))
	for k := range x {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ps, ok := props[k].(map[string]any)
		if !ok {
			if ap, ok := s["additionalProperties"].(bool); ok && !ap {
				return fmt.Errorf("%s: property %q is not in the schema %s", path, k, owner)
			}
			continue
		}
		if owner != "" {
			d.Seen[owner+"."+k] = true
		}
		if err := d.check(ps, x[k], path+"."+k, ""); err != nil {
			return err
		}
	}
	return nil
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

func typeMatches(t any, v any) bool {
	for _, name := range typeNames(t) {
		switch x := v.(type) {
		case nil:
			if name == "null" {
				return true
			}
		case bool:
			if name == "boolean" {
				return true
			}
		case string:
			if name == "string" {
				return true
			}
		case []any:
			if name == "array" {
				return true
			}
		case map[string]any:
			if name == "object" {
				return true
			}
		case json.Number:
			if name == "number" {
				return true
			}
			if f, err := x.Float64(); name == "integer" && err == nil && f == math.Trunc(f) && !strings.ContainsAny(x.String(), ".eE") {
				return true
			}
		}
	}
	return false
}

func typeNames(t any) []string {
	if s, ok := t.(string); ok {
		return []string{s}
	}
	var out []string
	for _, x := range asSlice(t) {
		out = append(out, x.(string))
	}
	return out
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "number"
}

func equal(a, b any) bool {
	if n, ok := b.(json.Number); ok {
		f, err := n.Float64()
		af, aok := a.(float64)
		return err == nil && aok && f == af
	}
	return a == b
}

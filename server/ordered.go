package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// ordered is a JSON object that keeps its keys in the order they were read, so that a
// document written by hand (openapi.json, whose paths are listed by importance) keeps
// that order when the server fills in its figures and writes it out again: a
// map[string]any would sort the keys, and /docs and every OpenAPI viewer would list
// /debug/vars before /v1/embeddings.
type ordered struct {
	keys []string
	vals map[string]any // values: ordered, []any, json.Number, string, bool or nil
}

// decodeOrdered parses one JSON value with objects as *ordered and numbers as
// json.Number (so that they are written back exactly as read).
func decodeOrdered(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, errors.New("data after the top-level value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &ordered{vals: map[string]any{}}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			key := k.(string) // the decoder only yields string keys inside an object
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			if _, dup := o.vals[key]; dup {
				return nil, fmt.Errorf("duplicate key %q", key)
			}
			o.keys = append(o.keys, key)
			o.vals[key] = v
		}
		_, err := d.Token() // '}'
		return o, err
	case json.Delim('['):
		a := []any{}
		for d.More() {
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token() // ']'
		return a, err
	}
	return tok, nil
}

// set replaces the value at path (object keys, and array indices as "1"), which
// must exist.
func (o *ordered) set(v any, path ...string) error {
	var cur any = o
	for i, k := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case *ordered:
			if _, ok := c.vals[k]; !ok {
				return fmt.Errorf("no key %v", path[:i+1])
			}
			if last {
				c.vals[k] = v
				return nil
			}
			cur = c.vals[k]
		case []any: // an index: "anyOf", "1"
			n, err := strconv.Atoi(k)
			if err != nil || n < 0 || n >= len(c) {
				return fmt.Errorf("no item %v", path[:i+1])
			}
			if last {
				c[n] = v
				return nil
			}
			cur = c[n]
		default:
			return fmt.Errorf("no object at %v", path[:i])
		}
	}
	return nil
}

// remove deletes key from the object at path, keeping the other keys' order.
func (o *ordered) remove(key string, path ...string) error {
	m := o
	for i, k := range path {
		next, ok := m.vals[k].(*ordered)
		if !ok {
			return fmt.Errorf("no object at %v", path[:i+1])
		}
		m = next
	}
	if _, ok := m.vals[key]; !ok {
		return fmt.Errorf("no key %v %q", path, key)
	}
	delete(m.vals, key)
	m.keys = slices.DeleteFunc(m.keys, func(k string) bool { return k == key })
	return nil
}

// MarshalJSON writes the keys in their order.
func (o *ordered) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

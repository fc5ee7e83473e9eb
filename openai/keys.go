package openai

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// ExactFields fills fields (key → destination) from the top-level keys of a JSON
// object, matching keys exactly, as OpenAI's API does: encoding/json alone matches
// them case-insensitively and lets the last of duplicate keys win, so that a proxy
// inspecting the body could read another request than the server. A key given
// twice is a *DecodeError naming it; keys not in fields are ignored. The values
// are slices of body, not copies (a 30 MB input is not copied again). body must
// be valid JSON (check it with json.Unmarshal first, for its error messages); one
// that is not an object leaves every field nil.
func ExactFields(body []byte, fields map[string]*json.RawMessage) error {
	for _, dst := range fields {
		*dst = nil
	}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil
	}
	seen := make(map[string]bool, len(fields))
	i = skipSpace(body, i+1)
	for i < len(body) && body[i] != '}' {
		end := skipString(body, i)
		key := string(body[i+1 : end-1])
		if strings.IndexByte(key, '\\') >= 0 {
			_ = json.Unmarshal(body[i:end], &key) // valid, as the body is
		}
		i = skipSpace(body, end)
		i = skipSpace(body, i+1) // past ':'
		vend := skipValue(body, i)
		if dst, ok := fields[key]; ok {
			if seen[key] {
				return &DecodeError{Param: key, Message: fmt.Sprintf("The JSON body holds the key '%s' more than once; send each key once.", key)}
			}
			seen[key] = true
			*dst = body[i:vend:vend]
		}
		i = skipSpace(body, vend)
		if i < len(body) && body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	return nil
}

// decodeExact is encoding/json's Unmarshal of a request body into w, a pointer to
// a struct of json.RawMessage fields tagged with their keys, with the keys matched
// exactly (ExactFields): a body that is not JSON is a *DecodeError with
// encoding/json's reason, a key given twice one naming it, and a key in another
// case ("Query", "INPUT") is ignored, as any unknown key is. Every request body of
// the OpenAI-shaped and rerank routes is read this way, so that they agree on
// what a key is.
func decodeExact(body []byte, w any) error {
	// Only checked here (a struct without fields keeps no copies); ExactFields
	// then takes the values as slices of body.
	if err := json.Unmarshal(body, &struct{}{}); err != nil {
		return &DecodeError{Message: "We could not parse the JSON body of your request: " + jsonErrorText(err)}
	}
	return ExactFields(body, rawFields(w))
}

// rawFields maps the json tags of w's fields (w points to a struct of
// json.RawMessage fields) to the fields, for ExactFields.
func rawFields(w any) map[string]*json.RawMessage {
	v := reflect.ValueOf(w).Elem()
	m := make(map[string]*json.RawMessage, v.NumField())
	for i := range v.NumField() {
		m[v.Type().Field(i).Tag.Get("json")] = v.Field(i).Addr().Interface().(*json.RawMessage)
	}
	return m
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the valid JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}

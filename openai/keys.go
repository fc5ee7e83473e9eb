package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ExactFields fills fields (key → destination) from the top-level keys of a JSON
// object, matching keys exactly, as OpenAI's API does: encoding/json alone matches
// them case-insensitively and lets the last of duplicate keys win, so that a proxy
// inspecting the body could read another request than the server. A key given
// twice is a *DecodeError naming it; keys not in fields are ignored. body must be a
// valid JSON object (check it with json.Unmarshal first, for its error messages).
func ExactFields(body []byte, fields map[string]*json.RawMessage) error {
	for _, dst := range fields {
		*dst = nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // '{'
		return &DecodeError{Message: "We could not parse the JSON body of your request: " + jsonErrorText(err)}
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return &DecodeError{Message: "We could not parse the JSON body of your request: " + jsonErrorText(err)}
		}
		key, _ := t.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return &DecodeError{Message: "We could not parse the JSON body of your request: " + jsonErrorText(err)}
		}
		dst, ok := fields[key]
		if !ok {
			continue
		}
		if seen[key] {
			return &DecodeError{Param: key, Message: fmt.Sprintf("The JSON body holds the key '%s' more than once; send each key once.", key)}
		}
		seen[key] = true
		*dst = value
	}
	return nil
}

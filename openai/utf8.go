package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// CheckUTF8 refuses a JSON body that holds bytes that are not UTF-8. RFC 8259
// requires UTF-8, and encoding/json would otherwise turn each bad byte into U+FFFD,
// so the client would get a vector of text it did not send, answered 200. OpenAI
// answers such bodies 400 as well.
//
// The error names where the bytes are: inputs is the field that holds the inputs
// ("input"; "texts" for POST /embed), searched element by element so that item(i)
// names the bad one in the message ("input 2"), and param names the field; any other
// field is named in the message only.
// It returns nil for a body that is UTF-8, after one scan of it.
//
// A lone surrogate escape ("\ud800") is not refused: it is valid JSON syntax made of
// ASCII bytes, and it is what JavaScript's JSON.stringify writes for a string cut in
// the middle of a surrogate pair (text.slice(0, n) on an emoji). It is embedded as
// U+FFFD, as encoding/json decodes it.
func CheckUTF8(body []byte, inputs string, item func(int) string) error {
	if utf8.Valid(body) {
		return nil
	}
	const advice = "a JSON body must be UTF-8 (RFC 8259); decode the text from its real encoding before sending it."
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) == nil {
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if i := slices.Index(keys, inputs); i > 0 {
			keys[0], keys[i] = keys[i], keys[0] // the inputs first: that is where text is
		}
		for _, k := range keys {
			raw := fields[k]
			if utf8.Valid(raw) {
				continue
			}
			if k == inputs {
				if i := invalidElement(raw); i >= 0 {
					return &DecodeError{Param: k, Message: fmt.Sprintf("%s is not valid UTF-8 (byte %s); %s", item(i), firstInvalid(raw), advice)}
				}
			}
			if !utf8.ValidString(k) {
				break // the key itself: name no field
			}
			// Another field is named in the message only: it may be one the request
			// does not know (and ignores), which param must not name.
			return &DecodeError{Message: fmt.Sprintf("'%s' is not valid UTF-8 (byte %s); %s", k, firstInvalid(raw), advice)}
		}
	}
	return &DecodeError{Message: fmt.Sprintf("The request body is not valid UTF-8 (byte %s); %s", firstInvalid(body), advice)}
}

// invalidElement returns the index of the first element of a JSON string or array
// that holds bytes that are not UTF-8: 0 for a string, -1 when none is found.
func invalidElement(raw json.RawMessage) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		return 0
	}
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return -1
	}
	for i, e := range elems {
		if !utf8.Valid(e) {
			return i
		}
	}
	return -1
}

// firstInvalid shows the first byte of b that does not start a valid UTF-8
// sequence, as 0xE9.
func firstInvalid(b []byte) string {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("0x%02X", b[i])
		}
		i += n
	}
	return "?"
}

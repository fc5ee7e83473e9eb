package openai

import (
	"errors"
	"fmt"
	"testing"
)

// TestDecodeRerankExactKeys: the rerank bodies match keys exactly, as
// /v1/embeddings does (ExactFields): a key in another case is an unknown field,
// ignored, so that a proxy and the server read the same request, and a key given
// twice is refused, naming it. Document objects' "text" is matched exactly too.
func TestDecodeRerankExactKeys(t *testing.T) {
	tests := []struct {
		name, body string
		want       string // the decoded request as %+v (pointers dereferenced), or ""
		param, msg string // the *DecodeError, when want is ""
	}{
		{"wrong case beside the key", `{"query":"q","Query":"other","documents":["a"],"Documents":["x","y"]}`,
			"q [a] top_n=0 return=false", "", ""},
		{"wrong case only", `{"Query":"q","documents":["a"]}`,
			"", "query", "'query' is a required property."},
		{"wrong-case options ignored", `{"query":"q","documents":["a","b"],"TOP_N":1,"Return_Documents":true}`,
			"q [a b] top_n=0 return=false", "", ""},
		{"duplicate query", `{"query":"q","documents":["a"],"query":"r"}`,
			"", "query", "The JSON body holds the key 'query' more than once; send each key once."},
		{"duplicate top_n", `{"query":"q","documents":["a"],"top_n":1,"top_n":2}`,
			"", "top_n", "The JSON body holds the key 'top_n' more than once; send each key once."},
		{"document objects", `{"query":"q","documents":[{"text":"a","Text":"x"},"b"]}`,
			"q [a b] top_n=0 return=false", "", ""},
		{"document with Text", `{"query":"q","documents":["a",{"Text":"b"}]}`,
			"", "documents", `document 1 is {"Text":"b"}; each document is a string or an object with a string 'text'`},
		{"document with text twice", `{"query":"q","documents":[{"text":"a","text":"b"}]}`,
			"", "documents", "document 0 holds the key 'text' more than once; send each key once."},
		{"nested duplicates are not the top level's", `{"query":"q","documents":["a"],"meta":{"query":1,"query":2}}`,
			"q [a] top_n=0 return=false", "", ""},
		{"array body", `[1]`, "", "", "We could not parse the JSON body of your request: the body must be a JSON object, not array."},
		{"null document", `{"query":"q","documents":["a",null]}`,
			"", "documents", "document 1 is null; each document is a string or an object with a string 'text'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := DecodeRerankRequest([]byte(tt.body))
			checkDecode(t, err, tt.want, tt.param, tt.msg, func() string {
				return fmt.Sprintf("%s %v top_n=%d return=%v", req.Query, req.Documents, req.TopN, req.ReturnDocuments)
			})
		})
	}
}

func TestDecodeTEIRerankExactKeys(t *testing.T) {
	tests := []struct {
		name, body string
		want       string
		param, msg string
	}{
		{"wrong case beside the key", `{"query":"q","texts":["a"],"Texts":["x","y"]}`, "q [a] raw=false text=false", "", ""},
		{"wrong case only", `{"query":"q","Texts":["a"]}`, "", "texts", "'texts' is a required property."},
		{"wrong-case options ignored", `{"query":"q","texts":["a"],"RAW_SCORES":true,"Return_Text":true,"Truncate":true}`,
			"q [a] raw=false text=false", "", ""},
		{"duplicate texts", `{"query":"q","texts":["a"],"texts":["b"]}`,
			"", "texts", "The JSON body holds the key 'texts' more than once; send each key once."},
		{"duplicate truncate", `{"query":"q","texts":["a"],"truncate":false,"truncate":true}`,
			"", "truncate", "The JSON body holds the key 'truncate' more than once; send each key once."},
		{"null text", `{"query":"q","texts":["a",null]}`, "", "texts", "texts[1] is null; each text is a string"},
		{"number text", `{"query":"q","texts":[7]}`, "", "texts", "texts[0] is 7; each text is a string"},
		{"texts not an array", `{"query":"q","texts":"a"}`, "", "texts", `"a" is not an array of strings - 'texts'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := DecodeTEIRerankRequest([]byte(tt.body))
			checkDecode(t, err, tt.want, tt.param, tt.msg, func() string {
				return fmt.Sprintf("%s %v raw=%v text=%v", req.Query, req.Texts, req.RawScores, req.ReturnText)
			})
		})
	}
}

// checkDecode compares a decode's outcome: the request as show() prints it when
// want is set, else the *DecodeError's param and message.
func checkDecode(t *testing.T, err error, want, param, msg string, show func() string) {
	t.Helper()
	if want != "" {
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got := show(); got != want {
			t.Errorf("decoded %s, want %s", got, want)
		}
		return
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T), want a *DecodeError", err, err)
	}
	if de.Param != param || de.Message != msg {
		t.Errorf("error param %q %q\nwant param %q %q", de.Param, de.Message, param, msg)
	}
}

package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// Bad input, table by table. errors_test.go already covers the common refusals (empty
// input, too many inputs or tokens, an over-long input, bad dimensions, bad token ids,
// not JSON); the cases here are the rest of docs/reliability.md's table, each with its
// exact status and body.

// postRaw sends body to path with the given Content-Type ("" sends none).
func (s *server) postRaw(t *testing.T, path, contentType string, body []byte) httpResult {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read body: %v", path, err)
	}
	return httpResult{status: resp.StatusCode, header: resp.Header, body: raw}
}

// TestBadInputTable: malformed bodies and wrong field types get 400 with the exact
// envelope, param naming the field at fault.
func TestBadInputTable(t *testing.T) {
	s := defaultServer(t)
	deep := func(prefix string) []byte {
		const depth = 100000 // encoding/json refuses nesting deeper than 10000
		return []byte(prefix + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
	}
	const notObject = `{"error":{"message":"We could not parse the JSON body of your request: the body must be a JSON object, not %s.","type":"invalid_request_error","param":null,"code":null}}`
	const wrongType = `{"error":{"message":"%s is not of type '%s' - '%s'","type":"invalid_request_error","param":"%s","code":null}}`
	const badInput = `{"error":{"message":"'input' must be a string, an array of strings, an array of integers (token ids), or an array of arrays of integers.","type":"invalid_request_error","param":"input","code":null}}`
	const tooDeep = `{"error":{"message":"We could not parse the JSON body of your request: invalid character '[' exceeded max depth.","type":"invalid_request_error","param":null,"code":null}}`
	const notUTF8 = `{"error":{"message":"%s is not valid UTF-8 (byte %s); a JSON body must be UTF-8 (RFC 8259); decode the text from its real encoding before sending it.","type":"invalid_request_error","param":"%s","code":null}}`
	id := s.modelID(t)
	tests := []struct {
		name string
		path string
		body []byte
		want string
	}{
		// Wrong field types.
		{"model a number", "/v1/embeddings", []byte(`{"input":"a","model":1}`), fmt.Sprintf(wrongType, "1", "string", "model", "model")},
		{"encoding_format a number", "/v1/embeddings", []byte(`{"input":"a","encoding_format":1}`), fmt.Sprintf(wrongType, "1", "string", "encoding_format", "encoding_format")},
		{"input_type a boolean", "/v1/embeddings", []byte(`{"input":"a","input_type":true}`), fmt.Sprintf(wrongType, "true", "string", "input_type", "input_type")},
		{"instruction a number", "/v1/embeddings", []byte(`{"input":"a","instruction":5}`), fmt.Sprintf(wrongType, "5", "string", "instruction", "instruction")},
		{"user an object", "/v1/embeddings", []byte(`{"input":"a","user":{}}`), fmt.Sprintf(wrongType, "{}", "string", "user", "user")},
		{"dimensions a boolean", "/v1/embeddings", []byte(`{"input":"a","dimensions":true}`), fmt.Sprintf(wrongType, "true", "integer", "dimensions", "dimensions")},
		{"dimensions in exponent form", "/v1/embeddings", []byte(`{"input":"a","dimensions":1e3}`), fmt.Sprintf(wrongType, "1e3", "integer", "dimensions", "dimensions")},
		{"dimensions beyond int32", "/v1/embeddings", []byte(`{"input":"a","dimensions":10000000000}`), fmt.Sprintf(wrongType, "10000000000", "integer", "dimensions", "dimensions")},
		{"input an object", "/v1/embeddings", []byte(`{"input":{"text":"a"}}`), badInput},
		{"input a boolean", "/v1/embeddings", []byte(`{"input":true}`), badInput},
		{"input an array of nulls", "/v1/embeddings", []byte(`{"input":[null]}`), badInput},
		{"input nested three deep", "/v1/embeddings", []byte(`{"input":[[[1]]]}`), `{"error":{"message":"'input' as an array of arrays must hold only integer token ids.","type":"invalid_request_error","param":"input","code":null}}`},
		{"token id fractional", "/v1/embeddings", []byte(`{"input":[1.5]}`), `{"error":{"message":"'input' as an array of token ids must hold only integers.","type":"invalid_request_error","param":"input","code":null}}`},
		{"token id beyond float64", "/v1/embeddings", []byte(`{"input":[1e400]}`), `{"error":{"message":"'input' as an array of token ids must hold only integers.","type":"invalid_request_error","param":"input","code":null}}`},
		// Values out of range.
		{"dimensions over native", "/v1/embeddings", []byte(`{"input":"a","dimensions":4096}`), `{"error":{"message":"'dimensions' must be between 32 and 64 for this model; got 4096.","type":"invalid_request_error","param":"dimensions","code":"invalid_value"}}`},
		{"unknown input_type", "/v1/embeddings", []byte(`{"input":"a","input_type":"questionnaire"}`), `{"error":{"message":"input_type \"questionnaire\" is not one of 'query', 'document', 'passage'.","type":"invalid_request_error","param":"input_type","code":"invalid_value"}}`},
		{"instruction of white space", "/v1/embeddings", []byte(`{"input":"a","input_type":"query","instruction":"  \n "}`), `{"error":{"message":"'instruction' must not be empty; omit it to use the default task.","type":"invalid_request_error","param":"instruction","code":"invalid_value"}}`},
		{"negative cl100k id", "/v1/embeddings", []byte(`{"input":[-1]}`), `{"error":{"message":"input 0: cl100k: token 0 is id -1, outside cl100k_base's range 0 to 100276 (token ids are read as tiktoken cl100k_base; start the server with --token-ids=native to send Qwen3 ids).","type":"invalid_request_error","param":"input","code":"invalid_token_id"}}`},
		// Not a JSON object.
		{"empty body", "/v1/embeddings", nil, `{"error":{"message":"We could not parse the JSON body of your request: unexpected end of JSON input.","type":"invalid_request_error","param":null,"code":null}}`},
		{"array body", "/v1/embeddings", []byte(`[1,2]`), fmt.Sprintf(notObject, "array")},
		{"string body", "/v1/embeddings", []byte(`"input"`), fmt.Sprintf(notObject, "string")},
		{"null body", "/v1/embeddings", []byte(`null`), `{"error":{"message":"'input' is a required property.","type":"invalid_request_error","param":"input","code":null}}`},
		{"trailing garbage", "/v1/embeddings", []byte(`{"input":"a"} x`), `{"error":{"message":"We could not parse the JSON body of your request: invalid character 'x' after top-level value.","type":"invalid_request_error","param":null,"code":null}}`},
		{"raw NUL byte in a string", "/v1/embeddings", []byte("{\"input\":\"a\x00b\"}"), `{"error":{"message":"We could not parse the JSON body of your request: invalid character '\\x00' in string literal.","type":"invalid_request_error","param":null,"code":null}}`},
		{"form-encoded body", "/v1/embeddings", []byte(`input=hello`), `{"error":{"message":"We could not parse the JSON body of your request: invalid character 'i' looking for beginning of value.","type":"invalid_request_error","param":null,"code":null}}`},
		{"nested 100000 deep in input", "/v1/embeddings", deep(`{"input":`), tooDeep},
		{"nested 100000 deep in an unknown field", "/v1/embeddings", deep(`{"input":"a","x":`), tooDeep},
		{"native embed not JSON", "/embed", []byte(`{"texts":`), `{"error":{"message":"We could not parse the JSON body of your request: unexpected end of JSON input.","type":"invalid_request_error","param":null,"code":null}}`},
		{"tokenize nested 100000 deep", "/tokenize", deep(`{"text":"a","x":`), tooDeep},
		// Bytes that are not UTF-8: refused, naming the input (RFC 8259).
		{"invalid UTF-8 in the only input", "/v1/embeddings", []byte("{\"input\":\"caf\xe9 bar\"}"), fmt.Sprintf(notUTF8, "input 0", "0xE9", "input")},
		{"invalid UTF-8 in input 2", "/v1/embeddings", []byte("{\"input\":[\"a\",\"b\",\"\xff\xfe\"]}"), fmt.Sprintf(notUTF8, "input 2", "0xFF", "input")},
		{"invalid UTF-8 in the instruction", "/v1/embeddings", []byte("{\"input\":\"a\",\"instruction\":\"t\xc3\"}"), strings.Replace(fmt.Sprintf(notUTF8, "'instruction'", "0xC3", ""), `"param":""`, `"param":null`, 1)},
		{"invalid UTF-8 in /embed texts", "/embed", []byte("{\"texts\":[\"a\",\"caf\xe9\"]}"), fmt.Sprintf(notUTF8, "texts[1]", "0xE9", "texts")},
		// A suffix that is not an input type, on the served model.
		{"unknown model suffix", "/v1/embeddings", []byte(`{"input":"a","model":"` + id + `:search"}`), "{\"error\":{\"message\":\"The model suffix `:search` is not an input type; use `" + id + ":query`, `" + id + ":document` or `" + id + ":passage` (case-insensitive), or send input_type.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"invalid_value\"}}"},
		// The native API's fields.
		{"native embed empty text among texts", "/embed", []byte(`{"texts":["a",""]}`), `{"error":{"message":"texts[1] is an empty string; every input must hold text.","type":"invalid_request_error","param":"texts","code":"empty_input"}}`},
		{"native embed no texts", "/embed", []byte(`{"texts":[]}`), `{"error":{"message":"'texts' must not be empty.","type":"invalid_request_error","param":"texts","code":"empty_input"}}`},
		{"native embed with text", "/embed", []byte(`{"text":"a"}`), `{"error":{"message":"POST /embed takes 'texts', an array of strings; 'text' is a field of POST /tokenize only.","type":"invalid_request_error","param":"text","code":null}}`},
		{"tokenize with text and texts", "/tokenize", []byte(`{"text":"a","texts":["b"]}`), `{"error":{"message":"Send 'text' (one string) or 'texts' (an array of strings), not both.","type":"invalid_request_error","param":"text","code":null}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			requireExactError(t, s.postRaw(t, tc.path, "application/json", tc.body), http.StatusBadRequest, tc.want)
		})
	}
	// Another method on a known URL: 405 with Allow, not a 404 that says the URL
	// does not exist.
	for _, c := range []struct{ method, path, allow string }{{"GET", "/v1/embeddings", "POST"}, {"GET", "/embed", "POST"}, {"POST", "/v1/models", "GET"}} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := s.do(t, c.method, c.path, nil, nil)
			requireExactError(t, r, http.StatusMethodNotAllowed, `{"error":{"message":"`+c.method+` is not allowed on `+c.path+`; use `+c.allow+`.","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}`)
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("Allow %q, want %q", got, c.allow)
			}
		})
	}
	// None of it hurt the server.
	requireReference(t, "after the bad inputs", s.rawEmbed(t, map[string]any{"input": "still fine"}, nil).Data[0].Embedding, expectDocument(t, "still fine"))
}

// TestAcceptedOddInputs: what is embedded rather than refused, and as what. The
// Content-Type header is not checked (curl -d sends form-encoded; the body is JSON
// all the same); a lone surrogate escape becomes U+FFFD as encoding/json decodes it
// (invalid UTF-8 bytes are refused: TestBadInputTable); an escaped NUL and control-token literals are plain text; the model
// name is only a label, never a path.
func TestAcceptedOddInputs(t *testing.T) {
	s := defaultServer(t)
	tests := []struct {
		name        string
		contentType string
		body        string
		want        string // the text whose reference vector must come back
	}{
		{"Content-Type text/plain", "text/plain", `{"input":"content type"}`, "content type"},
		{"no Content-Type", "", `{"input":"content type"}`, "content type"},
		{"Content-Type form-encoded (curl -d)", "application/x-www-form-urlencoded", `{"input":"content type"}`, "content type"},
		{"Content-Type with charset", "application/json; charset=utf-8", `{"input":"content type"}`, "content type"},
		{"lone surrogate escape", "application/json", `{"input":"x\ud800y"}`, "x\uFFFDy"},
		{"escaped NUL", "application/json", `{"input":"a\u0000b"}`, "a\x00b"},
		{"control-token literals", "application/json", `{"input":"<|endoftext|><|im_start|>user"}`, "<|endoftext|><|im_start|>user"},
		{"a path as model name", "application/json", `{"input":"model path","model":"../../../../etc/passwd"}`, "model path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.postRaw(t, "/v1/embeddings", tc.contentType, []byte(tc.body))
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, truncate(r.body))
			}
			var got rawEmbeddings
			r.decode(t, &got)
			want := expectDocument(t, tc.want)
			requireReference(t, "vector", got.Data[0].Embedding, want)
			if got.Usage.PromptTokens != len(want.tokens) {
				t.Errorf("prompt_tokens %d, want %d (%q)", got.Usage.PromptTokens, len(want.tokens), tc.want)
			}
		})
	}
	t.Run("control tokens tokenize as text", func(t *testing.T) {
		const text = "<|endoftext|>x<|im_start|><|im_end|>"
		r := s.do(t, http.MethodPost, "/tokenize", map[string]any{"text": text}, nil)
		var got struct {
			IDs []int32 `json:"ids"`
		}
		if err := json.Unmarshal(r.body, &got); r.status != http.StatusOK || err != nil {
			t.Fatalf("/tokenize: %d %s %v", r.status, truncate(r.body), err)
		}
		want := append(encode(t, text), eosID)
		if !slices.Equal(got.IDs, want) {
			t.Fatalf("ids %v, want %v", got.IDs, want)
		}
		for _, id := range got.IDs[:len(got.IDs)-1] {
			if id >= eosID {
				t.Fatalf("control id %d among %v", id, got.IDs)
			}
		}
	})
}

// countingReader yields n zero bytes and counts what was read.
type countingReader struct {
	left, read int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	n = min(n, c.left)
	clear(p[:n])
	c.left -= n
	c.read += n
	return int(n), nil
}

// sendLarge writes a POST of size bytes over a raw connection, chunked when chunked
// is set, and reads the answer while still writing: a server that answers early and
// closes makes the write fail, which must not hide its answer. It returns the answer
// and how many body bytes were written.
func sendLarge(t *testing.T, s *server, size int64, chunked bool) (httpResult, int64) {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	header := "POST /v1/embeddings HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\n"
	if chunked {
		header += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		header += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
	}
	body := &countingReader{left: size}
	written := make(chan struct{})
	go func() {
		defer close(written)
		if _, err := io.WriteString(conn, header); err != nil {
			return
		}
		w := io.Writer(conn)
		buf := make([]byte, 1<<20)
		for {
			n, err := body.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				if chunked {
					chunk = append(append([]byte(fmt.Sprintf("%x\r\n", n)), chunk...), "\r\n"...)
				}
				if _, werr := w.Write(chunk); werr != nil {
					return // the server has answered and closed
				}
			}
			if err != nil {
				if chunked {
					_, _ = io.WriteString(w, "0\r\n\r\n")
				}
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to a %d-byte body: %v", size, err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer body: %v", err)
	}
	conn.Close() // stops the writer if it is still going
	<-written
	return httpResult{status: resp.StatusCode, header: resp.Header, body: raw}, body.read
}

// TestHugeBodyAndHeaders: a 100 MB body is refused with 413 without being read (its
// declared length suffices) and with at most the 32 MiB limit read when chunked; the
// server's peak memory shows it. A 100 KiB header block gets 431.
func TestHugeBodyAndHeaders(t *testing.T) {
	requireLinux(t)
	s := ownServer(t, "--debug-vars", "--max-header-bytes", "65536")
	pid := s.Cmd.Process.Pid
	const size = 100 << 20
	const want413 = `{"error":{"message":"The request body is larger than the server's limit of 33554432 bytes (--max-body-bytes).","type":"invalid_request_error","param":null,"code":"request_too_large"}}`

	hwm0 := statusField(t, pid, "VmHWM")
	r, sent := sendLarge(t, s, size, false)
	requireExactError(t, r, http.StatusRequestEntityTooLarge, want413)
	hwm1 := statusField(t, pid, "VmHWM")
	t.Logf("declared 100 MB: 413 after %d MB written by the client; server peak RSS %d → %d MiB", sent>>20, hwm0>>10, hwm1>>10)
	// Nothing of the body is buffered: the peak may move by what the runtime does
	// anyway, far below the body.
	if grow := (hwm1 - hwm0) << 10; grow > 16<<20 {
		t.Errorf("peak RSS grew by %d MiB for a refused declared-length body, want < 16", grow>>20)
	}

	r, sent = sendLarge(t, s, size, true)
	requireExactError(t, r, http.StatusRequestEntityTooLarge, want413)
	hwm2 := statusField(t, pid, "VmHWM")
	t.Logf("chunked 100 MB: 413 after %d MB written by the client; server peak RSS %d → %d MiB", sent>>20, hwm1>>10, hwm2>>10)
	// Chunked, the limit is found by reading up to it: 32 MiB held, plus the
	// growth of the buffer that holds it.
	if grow := (hwm2 - hwm1) << 10; grow > 100<<20 {
		t.Errorf("peak RSS grew by %d MiB for a refused chunked body, want < 100 (the body was read past the limit?)", grow>>20)
	}
	if sent >= size {
		t.Errorf("the client wrote the whole %d-byte chunked body before the answer", sent)
	}

	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, s.URL+"/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("p", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("100 KiB header: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("100 KiB header: status %d, want 431", resp.StatusCode)
	}
	if r := s.do(t, http.MethodGet, "/health", nil, map[string]string{"X-Padding": strings.Repeat("p", 32<<10)}); r.status != http.StatusOK {
		t.Errorf("32 KiB header: status %d, want 200", r.status)
	}
	requireReference(t, "after the huge bodies", s.rawEmbed(t, map[string]any{"input": "still fine"}, nil).Data[0].Embedding, expectDocument(t, "still fine"))
}

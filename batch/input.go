package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"
)

// InputFormat says how input lines are read.
type InputFormat int

const (
	// Lines is one text per line; its id is the line number, from 1. Empty lines are
	// skipped (they hold no text to embed) but still counted, so ids stay line numbers.
	Lines InputFormat = iota
	// JSONL is one JSON object per line with an id and a text field. Blank lines are
	// skipped.
	JSONL
)

func (f InputFormat) String() string {
	if f == JSONL {
		return "jsonl"
	}
	return "lines"
}

// DefaultMaxLineBytes bounds one input line: a longer one is far over any model's
// context anyway, and the bound keeps a file without newlines from filling memory.
const DefaultMaxLineBytes = 16 << 20

// ReaderConfig says how to read items. The zero value reads plain lines.
type ReaderConfig struct {
	Format InputFormat
	// IDField and TextField name the JSONL fields; "" means "id" and "text".
	IDField, TextField string
	// MaxLineBytes bounds a line; 0 means DefaultMaxLineBytes.
	MaxLineBytes int
	// Fields names JSONL fields whose raw values each Item carries (passthrough
	// fields for Parquet output).
	Fields []string
	// FirstLine is the line number of the stream's first line (a shard's slice starts
	// mid-file); 0 means 1.
	FirstLine int64
}

// maxLine is MaxLineBytes or its default.
func (c ReaderConfig) maxLine() int {
	if c.MaxLineBytes <= 0 {
		return DefaultMaxLineBytes
	}
	return c.MaxLineBytes
}

// Item is one text to embed.
type Item struct {
	// ID is the item's id as compact JSON: a string or a number.
	ID json.RawMessage
	// Text is what is embedded; never empty for an item Next returns.
	Text string
	// Line is the item's line number in the input, from 1.
	Line int64
	// Fields holds the ReaderConfig.Fields the line has, raw.
	Fields map[string]json.RawMessage
}

// LineError is an input line that cannot be read as an item: not JSON, no id, no
// text, an empty text, a repeated id, or too long. The job stops at it unless told to
// skip invalid items. Msg continues the sentence "input line N …".
type LineError struct {
	Line int64
	Msg  string
	// Repeats is, for a repeated id, the line that holds it first; 0 otherwise.
	Repeats int64
}

func (e *LineError) Error() string { return fmt.Sprintf("input line %d %s", e.Line, e.Msg) }

// Reader reads items from a stream, one line at a time: it never holds more than
// one line. Not safe for concurrent use.
type Reader struct {
	r        *bufio.Reader
	cfg      ReaderConfig
	idKey    string
	textKey  string
	line     int64
	offset   int64
	blank    int64
	buf      []byte
	maxBytes int
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader, cfg ReaderConfig) *Reader {
	rd := &Reader{r: bufio.NewReaderSize(r, 1<<20), cfg: cfg, idKey: cfg.IDField, textKey: cfg.TextField, maxBytes: cfg.maxLine()}
	if rd.idKey == "" {
		rd.idKey = "id"
	}
	if rd.textKey == "" {
		rd.textKey = "text"
	}
	if cfg.FirstLine > 1 {
		rd.line = cfg.FirstLine - 1
	}
	return rd
}

// Line is the number of the last line read (FirstLine-1 before the first).
func (r *Reader) Line() int64 { return r.line }

// Blank is the number of empty lines skipped so far.
func (r *Reader) Blank() int64 { return r.blank }

// Offset is the number of input bytes consumed so far.
func (r *Reader) Offset() int64 { return r.offset }

// Next returns the next item, io.EOF at the end of the input, a *LineError for a line
// that is not an item (reading may go on after it), or a read error.
func (r *Reader) Next() (Item, error) {
	for {
		line, tooLong, err := r.readLine()
		if err != nil {
			return Item{}, err
		}
		r.line++
		if tooLong > 0 {
			return Item{}, &LineError{Line: r.line, Msg: fmt.Sprintf("is %d bytes long; the limit is %d", tooLong, r.maxBytes)}
		}
		if len(bytes.TrimSpace(line)) == 0 && (r.cfg.Format == JSONL || len(line) == 0) {
			r.blank++
			continue
		}
		// Checked on the raw bytes: encoding/json reads a JSON string's invalid
		// bytes as U+FFFD, and a Latin-1 corpus would be embedded mangled, without
		// a word, where the HTTP API refuses the same bytes.
		if !utf8.Valid(line) {
			return Item{}, &LineError{Line: r.line, Msg: invalidUTF8(line)}
		}
		if r.cfg.Format == Lines {
			return Item{ID: json.RawMessage(strconv.FormatInt(r.line, 10)), Text: string(line), Line: r.line}, nil
		}
		it, msg := r.parseJSON(line)
		if msg != "" {
			return Item{}, &LineError{Line: r.line, Msg: msg}
		}
		it.Line = r.line
		return it, nil
	}
}

// readLine returns the next line without its "\n" or "\r\n". A line over the limit is
// consumed to its end and reported by its length instead. At the end of the input it
// returns io.EOF; a last line without a newline is still a line.
func (r *Reader) readLine() (line []byte, tooLong int64, err error) {
	r.buf = r.buf[:0]
	var n int64
	var last []byte
	dropped := false
	for {
		chunk, err := r.r.ReadSlice('\n')
		last = chunk
		n += int64(len(chunk))
		r.offset += int64(len(chunk))
		if !dropped && len(r.buf)+len(chunk) <= r.maxBytes+2 { // room for "\r\n"
			r.buf = append(r.buf, chunk...)
		} else {
			dropped = true
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if n == 0 {
				return nil, 0, io.EOF
			}
		default:
			return nil, 0, fmt.Errorf("read input: %w", err)
		}
		break
	}
	if dropped {
		if bytes.HasSuffix(last, []byte("\r\n")) {
			n--
		}
		if bytes.HasSuffix(last, []byte("\n")) {
			n--
		}
		return nil, n, nil
	}
	b := bytes.TrimSuffix(r.buf, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) > r.maxBytes {
		return nil, int64(len(b)), nil
	}
	return b, 0, nil
}

// parseJSON reads one JSONL line; a line that is not an item gets the rest of the
// sentence "input line N …" saying why.
func (r *Reader) parseJSON(line []byte) (Item, string) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		// Go's decoder message alone ("invalid character 'o' in literal null") does not
		// say which rule the line broke; the line's start shows what it holds.
		return Item{}, fmt.Sprintf("is not a JSON object (%v); it begins %s", err, quoteStart(line, 40))
	}
	if key := r.repeatedKey(line); key != "" {
		return Item{}, fmt.Sprintf("holds the key %q more than once; give each key once (the HTTP API refuses such bodies too: JSON readers differ on which one counts)", key)
	}
	rawID, ok := obj[r.idKey]
	if !ok {
		return Item{}, fmt.Sprintf("has no %q field (set the id field's name with --id-field)", r.idKey)
	}
	id, err := compactID(rawID)
	if err != nil {
		return Item{}, fmt.Sprintf("has a %q field that is not a string or a number: %s", r.idKey, truncateBytes(bytes.TrimSpace(rawID), 40))
	}
	rawText, ok := obj[r.textKey]
	if !ok {
		return Item{}, fmt.Sprintf("has no %q field (set the text field's name with --text-field)", r.textKey)
	}
	var text string
	if err := json.Unmarshal(rawText, &text); err != nil {
		return Item{}, fmt.Sprintf("has a %q field that is not a string", r.textKey)
	}
	if text == "" {
		return Item{}, fmt.Sprintf("(id %s) has an empty %q field: there is no text to embed", id, r.textKey)
	}
	it := Item{ID: id, Text: text}
	for _, name := range r.cfg.Fields {
		if v, ok := obj[name]; ok {
			if it.Fields == nil {
				it.Fields = make(map[string]json.RawMessage, len(r.cfg.Fields))
			}
			it.Fields[name] = v
		}
	}
	return it, ""
}

// repeatedKey returns a key the reader uses (the id, the text, a passthrough field)
// that the object on line (valid JSON) holds more than once, or "". encoding/json
// keeps the last of such keys silently, where another reader may keep the first: the
// job would embed a text that its user, reading the file another way, never sees.
func (r *Reader) repeatedKey(line []byte) string {
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // '{'
		return ""
	}
	seen := make(map[string]bool, 2+len(r.cfg.Fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		key, _ := tok.(string)
		if key == r.idKey || key == r.textKey || slices.Contains(r.cfg.Fields, key) {
			if seen[key] {
				return key
			}
			seen[key] = true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}

// quoteStart quotes the first n bytes of b (cut at a character boundary), marking a
// cut with "…".
func quoteStart(b []byte, n int) string {
	if len(b) <= n {
		return strconv.Quote(string(b))
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return strconv.Quote(string(b[:n])) + "…"
}

// compactID accepts a JSON string or number and returns it compacted, so an id read
// back from the output compares equal byte for byte.
func compactID(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !(raw[0] == '"' || raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return nil, fmt.Errorf("the id %s is not a string or a number", truncateBytes(raw, 40))
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return json.RawMessage(b.Bytes()), nil
}

func truncateBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// invalidUTF8 words a line that is not UTF-8, naming its first bad byte.
func invalidUTF8(line []byte) string {
	at := 0
	for at < len(line) {
		r, size := utf8.DecodeRune(line[at:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		at += size
	}
	return fmt.Sprintf("is not valid UTF-8 (byte 0x%02X at byte %d of the line): the input must be UTF-8; convert it first (iconv -f latin1 -t utf-8, for a Latin-1 file)", line[at], at+1)
}

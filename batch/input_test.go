package batch

import (
	"errors"
	"io"
	"strings"
	"testing"
)

type readResult struct {
	id, text string
	line     int64
	err      string // LineError message ("" for an item)
}

func readAll(t *testing.T, input string, cfg ReaderConfig) ([]readResult, *Reader) {
	t.Helper()
	r := NewReader(strings.NewReader(input), cfg)
	var out []readResult
	for {
		it, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, r
		}
		var le *LineError
		switch {
		case errors.As(err, &le):
			out = append(out, readResult{line: le.Line, err: le.Msg})
		case err != nil:
			t.Fatalf("Next: %v", err)
		default:
			out = append(out, readResult{id: string(it.ID), text: it.Text, line: it.Line})
		}
	}
}

func TestReader(t *testing.T) {
	tests := []struct {
		name  string
		input string
		cfg   ReaderConfig
		want  []readResult
		blank int64
	}{
		{"lines", "alpha\r\nbeta\n\n  \ngamma", ReaderConfig{},
			[]readResult{{"1", "alpha", 1, ""}, {"2", "beta", 2, ""}, {"4", "  ", 4, ""}, {"5", "gamma", 5, ""}}, 1},
		{"lines keep JSON-looking text", `{"id": 1}` + "\n", ReaderConfig{},
			[]readResult{{"1", `{"id": 1}`, 1, ""}}, 0},
		{"jsonl", `{"id": "a", "text": "first"}` + "\n\n" + `{"text":"second","id":  42 ,"extra":[1]}` + "\n" + `{"id":-1.5e3,"text":"ünï\n"}`,
			ReaderConfig{Format: JSONL},
			[]readResult{{`"a"`, "first", 1, ""}, {"42", "second", 3, ""}, {"-1.5e3", "ünï\n", 4, ""}}, 1},
		{"jsonl custom fields", `{"doc_id": "x", "body": "b", "id": 9, "text": "t"}` + "\n",
			ReaderConfig{Format: JSONL, IDField: "doc_id", TextField: "body"},
			[]readResult{{`"x"`, "b", 1, ""}}, 0},
		{"jsonl errors", strings.Join([]string{
			`not json`,
			`{"text": "no id"}`,
			`{"id": 1}`,
			`{"id": {"a": 1}, "text": "x"}`,
			`{"id": null, "text": "x"}`,
			`{"id": 2, "text": 5}`,
			`{"id": 3, "text": ""}`,
			`["id", "text"]`,
			`{"id": 4, "text": "a long text that is cut off before its end`,
		}, "\n"), ReaderConfig{Format: JSONL},
			[]readResult{
				{line: 1, err: `is not a JSON object (invalid character 'o' in literal null (expecting 'u')); it begins "not json"`},
				{line: 2, err: `has no "id" field (set the id field's name with --id-field)`},
				{line: 3, err: `has no "text" field (set the text field's name with --text-field)`},
				{line: 4, err: `has a "id" field that is not a string or a number: {"a": 1}`},
				{line: 5, err: `has a "id" field that is not a string or a number: null`},
				{line: 6, err: `has a "text" field that is not a string`},
				{line: 7, err: `(id 3) has an empty "text" field: there is no text to embed`},
				{line: 8, err: `is not a JSON object (json: cannot unmarshal array into Go value of type map[string]json.RawMessage); it begins "[\"id\", \"text\"]"`},
				{line: 9, err: `is not a JSON object (unexpected end of JSON input); it begins "{\"id\": 4, \"text\": \"a long text that is c"…`},
			}, 0},
		{"not UTF-8", "caf\xe9\n" + `{"id": 1, "text": "caf` + "\xe9" + `"}` + "\nfine\n", ReaderConfig{},
			[]readResult{
				{line: 1, err: "is not valid UTF-8 (byte 0xE9 at byte 4 of the line): the input must be UTF-8; convert it first (iconv -f latin1 -t utf-8, for a Latin-1 file)"},
				{line: 2, err: "is not valid UTF-8 (byte 0xE9 at byte 23 of the line): the input must be UTF-8; convert it first (iconv -f latin1 -t utf-8, for a Latin-1 file)"},
				{"3", "fine", 3, ""}}, 0},
		{"JSONL not UTF-8", `{"id": 1, "text": "caf` + "\xe9" + `"}` + "\n", ReaderConfig{Format: JSONL},
			[]readResult{{line: 1, err: "is not valid UTF-8 (byte 0xE9 at byte 23 of the line): the input must be UTF-8; convert it first (iconv -f latin1 -t utf-8, for a Latin-1 file)"}}, 0},
		{"too long then fine", strings.Repeat("x", 40) + "\nshort\n" + strings.Repeat("y", 16) + "\r\n", ReaderConfig{MaxLineBytes: 16},
			[]readResult{{line: 1, err: "is 40 bytes long; the limit is 16"}, {"2", "short", 2, ""}, {"3", strings.Repeat("y", 16), 3, ""}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, r := readAll(t, tt.input, tt.cfg)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d results %+v, want %d %+v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("result %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
			if r.Blank() != tt.blank {
				t.Errorf("blank = %d, want %d", r.Blank(), tt.blank)
			}
			if r.Offset() != int64(len(tt.input)) {
				t.Errorf("offset = %d, want %d (the whole input)", r.Offset(), len(tt.input))
			}
		})
	}
}

// TestReaderLongLineAcrossBuffers: a line much longer than the read buffer is refused
// without being held, and reading goes on at the next line.
func TestReaderLongLineAcrossBuffers(t *testing.T) {
	input := strings.Repeat("z", 5<<20) + "\nafter\n"
	got, _ := readAll(t, input, ReaderConfig{MaxLineBytes: 1 << 20})
	want := []readResult{{line: 1, err: "is 5242880 bytes long; the limit is 1048576"}, {"2", "after", 2, ""}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

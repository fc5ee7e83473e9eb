package worker

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// splitCommand splits a command line into words as a POSIX shell does, without any
// expansion: blanks separate words; single quotes keep everything literally; inside
// double quotes a backslash escapes only $ ` " \ and newline; elsewhere a backslash
// escapes any character. WORKER_CMD is a command line rather than a list so that it
// reads like one in a Makefile or a terminal.
func splitCommand(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		inTok bool // a word has started (possibly empty: '')
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inTok {
				words = append(words, cur.String())
				cur.Reset()
				inTok = false
			}
		case c == '\'':
			inTok = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(string(rs[i+1 : j]))
			i = j
		case c == '"':
			inTok = true
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("$`\"\\\n", rs[j+1]) {
					j++
				}
				cur.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, errors.New("unterminated double quote")
			}
			i = j
		case c == '\\':
			if i+1 == len(rs) {
				return nil, errors.New("trailing backslash")
			}
			inTok = true
			i++
			cur.WriteRune(rs[i])
		default:
			inTok = true
			cur.WriteRune(c)
		}
	}
	if inTok {
		words = append(words, cur.String())
	}
	return words, nil
}

func TestSplitCommand(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "bin/embed-stack worker --model models/tiny.gguf", want: []string{"bin/embed-stack", "worker", "--model", "models/tiny.gguf"}},
		{in: "  a\t b \n c  ", want: []string{"a", "b", "c"}},
		{in: "", want: nil},
		{in: `a 'b c' "d e"`, want: []string{"a", "b c", "d e"}},
		{in: `'x'"y"z`, want: []string{"xyz"}},
		{in: `'' ""`, want: []string{"", ""}},
		{in: `a\ b`, want: []string{"a b"}},
		{in: `"a\"b\\c\d"`, want: []string{`a"b\c\d`}},
		{in: `'a\"b'`, want: []string{`a\"b`}},
		{in: `--model "/Users/me/My Models/Qwen3"`, want: []string{"--model", "/Users/me/My Models/Qwen3"}},
		{in: `$HOME`, want: []string{"$HOME"}},
		{in: `a 'b`, wantErr: "unterminated single quote"},
		{in: `a "b`, wantErr: "unterminated double quote"},
		{in: `a\`, wantErr: "trailing backslash"},
	} {
		got, err := splitCommand(tc.in)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("splitCommand(%q) = %q, %v; want error %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

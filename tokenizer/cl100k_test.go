package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	tiktoken "github.com/tiktoken-go/tokenizer"

	"github.com/embed-stack/embed-stack/internal/testrepo"
)

func TestCl100kKnownIDs(t *testing.T) {
	c, err := NewCl100k()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ids  []int64
		want string
	}{
		{[]int64{15339, 1917}, "hello world"},
		{[]int64{9906, 4435, 0}, "Hello World!"},
		{[]int64{100257}, "<|endoftext|>"}, // special tokens decode to their text, as in tiktoken
		{[]int64{100276}, "<|endofprompt|>"},
		{nil, ""},
	}
	for _, tt := range tests {
		if got, err := c.Decode(tt.ids); err != nil || got != tt.want {
			t.Errorf("Decode(%v) = %q, %v; want %q", tt.ids, got, err, tt.want)
		}
	}
}

// TestCl100kRoundTrip encodes text with the library's own encoder, as LangChain does
// with tiktoken, and decodes it back.
func TestCl100kRoundTrip(t *testing.T) {
	enc, err := tiktoken.Get(tiktoken.Cl100kBase)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCl100k()
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{
		"The quick brown fox jumps over the lazy dog.",
		"caf\u00e9 na\u00efve \u4e2d\u6587 \ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627 \U0001F468\u200d\U0001F469\u200d\U0001F467",
		"  leading and trailing  \n\r\n\ttabs",
		"func main() {\n\tfmt.Println(\"hi\")\n}\n",
	}
	for _, name := range []string{"gettysburg.txt", "multilingual.txt"} {
		raw, err := os.ReadFile(filepath.Join(testrepo.RootOf(t), "testdata", "corpus", name))
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(raw))
	}
	for _, text := range texts {
		uids, _, err := enc.Encode(text)
		if err != nil {
			t.Fatal(err)
		}
		if len(uids) == 0 {
			t.Fatalf("the encoder gave no ids for %q", text)
		}
		ids := make([]int64, len(uids))
		for i, id := range uids {
			ids[i] = int64(id)
		}
		got, err := c.Decode(ids)
		if err != nil || got != text {
			t.Errorf("Decode(Encode(%q)) = %q, %v", abbrev(text), abbrev(got), err)
		}
	}
}

func TestCl100kErrors(t *testing.T) {
	c, err := NewCl100k()
	if err != nil {
		t.Fatal(err)
	}
	// A byte token that holds one byte of a multi-byte character: the lead byte of "é".
	var half int64 = -1
	for id, p := range c.pieces {
		if p == "\xc3" {
			half = int64(id)
			break
		}
	}
	if half < 0 {
		t.Fatal("cl100k has no single-byte token 0xC3")
	}
	tests := []struct {
		name    string
		ids     []int64
		wantErr string
	}{
		{"negative", []int64{15339, -5}, "token 1 is id -5, outside cl100k_base's range 0 to 100276"},
		{"past the end", []int64{100277}, "token 0 is id 100277, outside"},
		{"huge", []int64{15339, 1917, 1 << 40}, "token 2 is id 1099511627776, outside"},
		{"unassigned gap", []int64{15339, 100256}, "token 1 is id 100256, which cl100k_base does not assign"},
		{"unassigned gap after the fim tokens", []int64{100261}, "token 0 is id 100261, which cl100k_base does not assign"},
		{"half a character", []int64{15339, half}, "byte 5 of the text, in token 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Decode(tt.ids)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Decode(%v) = %q, %v; want an error containing %q", tt.ids, got, err, tt.wantErr)
			}
		})
	}
	// The same byte followed by its continuation byte is a whole character again.
	var cont int64 = -1
	for id, p := range c.pieces {
		if p == "\xa9" {
			cont = int64(id)
		}
	}
	if got, err := c.Decode([]int64{half, cont}); err != nil || got != "\u00e9" || !utf8.ValidString(got) {
		t.Fatalf("Decode(0xC3, 0xA9 byte tokens) = %q, %v; want %q", got, err, "\u00e9")
	}
}

// TestCl100kTable checks the table against the library's vocabulary size: 100256
// ordinary tokens plus five special ones.
func TestCl100kTable(t *testing.T) {
	c, err := NewCl100k()
	if err != nil {
		t.Fatal(err)
	}
	var assigned int
	for _, p := range c.pieces {
		if p != "" {
			assigned++
		}
	}
	if assigned != 100256+5 {
		t.Fatalf("%d assigned ids, want %d", assigned, 100256+5)
	}
	if !slices.Contains(c.pieces, " world") {
		t.Fatal(`no token " world"`)
	}
}

package routing_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/embed-stack/embed-stack/internal/testenv"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// The fuzzers drive Router.Prepare (wrapping, tokenization with the real Qwen3
// tokenizer, the token-id policies, the limits) as a request's inputs would. They
// need models/tiny.gguf for its vocabulary (`make models`); without it they skip,
// or fail under EMBED_STACK_REQUIRE_E2E=1.
//
//	go test ./routing -run '^$' -fuzz FuzzPrepareText -fuzztime 60s
//	go test ./routing -run '^$' -fuzz FuzzPrepareTokenIDs -fuzztime 60s
//
// `make fuzz` (part of `make test`) runs each for a bounded time; the seed corpora
// are in testdata/fuzz.

// fuzzVocab is the real tokenizer plus what the invariants need to know about its
// special tokens.
type fuzzVocab struct {
	tok *tokenizer.Tokenizer
	// control holds the ids that text must never produce: every id from EOS up
	// that does not tokenize back to itself from its own literal.
	control map[int32]bool
	// literals are the added tokens that text does produce (<think>, ...): a text
	// holding one is normalised in stretches, so its round trip is not checked.
	literals []string
}

func loadFuzzVocab(f *testing.F) *fuzzVocab {
	f.Helper()
	dir, err := os.Getwd()
	if err != nil {
		f.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if parent := filepath.Dir(dir); parent != dir {
			dir = parent
			continue
		}
		f.Fatal("no go.mod above the package directory")
	}
	path := filepath.Join(dir, "models", "tiny.gguf")
	if _, err := os.Stat(path); err != nil {
		if testenv.RequireE2E() {
			f.Fatalf("EMBED_STACK_REQUIRE_E2E=1 and %s is missing: run `make models`", path)
		}
		f.Skipf("%s is missing: run `make models`", path)
	}
	tok, err := tokenizer.FromGGUF(path)
	if err != nil {
		f.Fatal(err)
	}
	v := &fuzzVocab{tok: tok, control: map[int32]bool{}}
	for id := routing.EOS; int(id) < tok.VocabSize(); id++ {
		lit, err := tok.Decode([]int32{id})
		if err != nil {
			continue // unused
		}
		if slices.Equal(tok.Encode(lit), []int32{id}) {
			v.literals = append(v.literals, lit)
		} else {
			v.control[id] = true
		}
	}
	if !v.control[routing.EOS] {
		f.Fatalf("<|endoftext|> (%d) tokenizes from its own literal: the vocabulary is not Qwen3's", routing.EOS)
	}
	return v
}

// checkSeq checks a prepared sequence: at most the limit long, closed by EOS, with
// no control id before it.
func (v *fuzzVocab) checkSeq(t *testing.T, seq []int32, limit int) {
	t.Helper()
	if len(seq) < 2 || len(seq) > limit {
		t.Fatalf("sequence of %d tokens (limit %d)", len(seq), limit)
	}
	if seq[len(seq)-1] != routing.EOS {
		t.Fatalf("sequence ends with %d, not EOS", seq[len(seq)-1])
	}
	for i, id := range seq[:len(seq)-1] {
		if v.control[id] || id < 0 || int(id) >= v.tok.VocabSize() {
			t.Fatalf("id %d at %d of %v: text produced a control or out-of-vocabulary id", id, i, seq)
		}
	}
}

// checkText requires seq (EOS dropped) to decode to the NFC form of text, unless
// the text is not valid UTF-8 or holds an added-token literal.
func (v *fuzzVocab) checkText(t *testing.T, seq []int32, text string) {
	t.Helper()
	if !utf8.ValidString(text) {
		return
	}
	for _, l := range v.literals {
		if strings.Contains(text, l) {
			return
		}
	}
	got, err := v.tok.Decode(seq[:len(seq)-1])
	if err != nil {
		t.Fatalf("decode %v: %v", seq, err)
	}
	if want := norm.NFC.String(text); got != want {
		t.Fatalf("the sequence decodes to %q, want %q", got, want)
	}
}

// requireInputError requires err to be a *routing.InputError on one of params.
func requireInputError(t *testing.T, err error, params ...string) *routing.InputError {
	t.Helper()
	var ie *routing.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("error %T %v, want *routing.InputError", err, err)
	}
	if ie.Message == "" || ie.Code == "" || !slices.Contains(params, ie.Param) {
		t.Fatalf("InputError %+v, want a message, a code and param in %v", ie, params)
	}
	return ie
}

// inputTypes maps the fuzzer's byte to an input_type, valid or not.
var inputTypes = []string{"", "query", "passage", " QUERY ", "document", "questionnaire"}

// FuzzPrepareText: any text, input type and instruction is either refused with an
// InputError on input, input_type or instruction, or becomes two sequences (the
// text, then a fixed second input, in order) that are closed by EOS, hold no control
// id, respect the limits, and decode back to exactly the wrapped text.
func FuzzPrepareText(f *testing.F) {
	v := loadFuzzVocab(f)
	f.Add("hello world", byte(0), "", false)
	f.Add("what is a transformer?", byte(1), "Find code", true)
	f.Add("<|endoftext|>", byte(2), "", false)
	const maxInput = 4096 // small, so that the fuzzer reaches the limit
	r := &routing.Router{
		Config:    routing.Config{Dim: 64, MaxInputTokens: maxInput, WarmMaxTokens: maxInput, MaxInstructionBytes: 512},
		Tokenizer: v.tok,
	}
	const second = "a fixed second input"
	f.Fuzz(func(t *testing.T, text string, typ byte, instruction string, withInstruction bool) {
		req := &routing.Request{Texts: []string{text, second}, InputType: inputTypes[int(typ)%len(inputTypes)]}
		if withInstruction {
			req.Instruction = &instruction
		}
		seqs, err := r.Prepare(req)
		if err != nil {
			ie := requireInputError(t, err, "input", "input_type", "instruction")
			switch {
			case ie.Param == "input_type" && req.InputType != inputTypes[5]:
				t.Fatalf("input_type %q refused: %v", req.InputType, err)
			case ie.Param == "input" && text != "" && ie.Code != routing.CodeContextLength:
				t.Fatalf("input %q refused: %v", text, err)
			}
			return
		}
		if len(seqs) != 2 {
			t.Fatalf("%d sequences for 2 inputs", len(seqs))
		}
		kind, _ := routing.ParseInputType(req.InputType)
		if req.InputType == "" && withInstruction {
			kind = routing.Query // an instruction alone makes a query
		}
		task := routing.DefaultInstruction
		if withInstruction {
			task = strings.TrimSpace(instruction)
		}
		for i, in := range []string{text, second} {
			v.checkSeq(t, seqs[i], maxInput)
			v.checkText(t, seqs[i], routing.Wrap(kind, task, in))
		}
	})
}

// FuzzPrepareTokenIDs: token-id inputs under the native and cl100k policies. Native
// ids are taken as they are (after the query prefix) or refused naming the first id
// outside the vocabulary; cl100k ids are decoded and re-tokenized as text, or
// refused as invalid_token_id or empty_input.
func FuzzPrepareTokenIDs(f *testing.F) {
	v := loadFuzzVocab(f)
	cl, err := tokenizer.NewCl100k()
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{1, 0, 2, 0}, false, false)
	f.Add([]byte{0xff, 0xff, 0x10, 0x27}, true, true)
	r := func(mode routing.TokenIDMode) *routing.Router {
		return &routing.Router{Config: routing.Config{Dim: 64, TokenIDs: mode}, Tokenizer: v.tok, Cl100k: cl}
	}
	native, viaCl100k := r(routing.TokenIDsNative), r(routing.TokenIDsCl100k)
	vocab := int64(v.tok.VocabSize())
	f.Fuzz(func(t *testing.T, data []byte, query, useCl100k bool) {
		// Two bytes per id, spread over [-10000, 186605): mostly in the vocabulary,
		// some negative, some past it.
		ids := make([]int64, len(data)/2)
		for i := range ids {
			ids[i] = int64(binary.LittleEndian.Uint16(data[2*i:]))*3 - 10000
		}
		if useCl100k {
			for i := range ids {
				ids[i] = (ids[i] + 10000) * 2 / 3 // [0, 131070): cl100k's range, its gaps, and past it
			}
		}
		req := &routing.Request{TokenIDs: [][]int64{ids}}
		if query {
			req.InputType = "query"
		}
		router := native
		if useCl100k {
			router = viaCl100k
		}
		seqs, err := router.Prepare(req)
		if len(ids) == 0 {
			if ie := requireInputError(t, err, "input"); ie.Code != routing.CodeEmptyInput {
				t.Fatalf("empty id list: %v", err)
			}
			return
		}
		if useCl100k {
			text, decErr := cl.Decode(ids)
			switch {
			case decErr != nil:
				if ie := requireInputError(t, err, "input"); ie.Code != routing.CodeInvalidTokenID {
					t.Fatalf("ids cl100k refuses (%v) gave %v", decErr, err)
				}
			case text == "":
				if ie := requireInputError(t, err, "input"); ie.Code != routing.CodeEmptyInput {
					t.Fatalf("ids decoding to nothing gave %v", err)
				}
			case err != nil:
				t.Fatalf("cl100k text %q refused: %v", text, err)
			default:
				v.checkSeq(t, seqs[0], 32768)
				typ := routing.Document
				if query {
					typ = routing.Query
				}
				v.checkText(t, seqs[0], routing.Wrap(typ, routing.DefaultInstruction, text))
			}
			return
		}
		bad := slices.IndexFunc(ids, func(id int64) bool { return id < 0 || id >= vocab })
		if bad >= 0 {
			if ie := requireInputError(t, err, "input"); ie.Code != routing.CodeInvalidTokenID {
				t.Fatalf("id %d refused with %v", ids[bad], err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ids %v refused: %v", ids, err)
		}
		var prefix []int32
		if query {
			prefix = v.tok.Encode(strings.TrimSuffix(routing.Wrap(routing.Query, routing.DefaultInstruction, "x"), "x"))
		}
		want := slices.Clone(prefix)
		for _, id := range ids {
			want = append(want, int32(id))
		}
		want = append(want, routing.EOS)
		if !slices.Equal(seqs[0], want) {
			t.Fatalf("native ids %v prepared as %v, want %v", ids, seqs[0], want)
		}
	})
}

package batch

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNPYPlainIDs: a .npy output's ids file holds each id as plain text, one a line
// (a string's value, a number as written), and its header marks that form with ")}"
// (issue 27: it held JSON-quoted ids).
func TestNPYPlainIDs(t *testing.T) {
	in := `{"id":"doc 1","text":"a"}` + "\n" + `{"id":"ünï \"q\"","text":"b"}` + "\n" + `{"id":42,"text":"c"}` + "\n" + `{"id":"x<y&z","text":"d"}` + "\n"
	out := filepath.Join(t.TempDir(), "v.npy")
	if _, err := runJob(t, &Job{Input: strings.NewReader(in), Reader: ReaderConfig{Format: JSONL}, Output: out, Format: FormatNPY, Embedder: &fakeEmbedder{}}); err != nil {
		t.Fatal(err)
	}
	ids, _ := os.ReadFile(IDsPath(out))
	if want := "doc 1\nünï \"q\"\n42\nx<y&z\n"; string(ids) != want {
		t.Errorf("ids file %q, want %q", ids, want)
	}
	b, _ := os.ReadFile(out)
	if !bytes.Contains(b[:npyHeaderLen], []byte("'shape': (4, 4)} ")) {
		t.Errorf("header %q does not mark plain ids", b[:npyHeaderLen])
	}
	if rows, _, _ := readNPY(t, out); rows != 4 {
		t.Errorf("%d rows, want 4", rows)
	}
}

// TestNPYPlainIDsRefusals: ids that plain text cannot keep apart or on one line are
// refused, by line, and skipped with SkipInvalid.
func TestNPYPlainIDsRefusals(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"string and number", `{"id":"7","text":"a"}` + "\n" + `{"id":7,"text":"b"}` + "\n",
			`input line 2 repeats the id 7 of line 1 (as text, which a .parquet or .npy output holds: "7" and 7 are one id there)`},
		{"line break", `{"id":"ok","text":"a"}` + "\n" + `{"id":"a\nb","text":"b"}` + "\n",
			`input line 2 has the id "a\nb", which holds a line break: a .npy output's ids file holds one id a line, as text; choose a .jsonl or .parquet --output for such ids (fix the input, or pass --skip-invalid to skip such lines)`},
		{"carriage return", `{"id":"ok","text":"a"}` + "\n" + `{"id":"a\r","text":"b"}` + "\n",
			`input line 2 has the id "a\r", which holds a line break`},
	}
	for _, c := range cases {
		out := filepath.Join(t.TempDir(), "v.npy")
		_, err := runJob(t, &Job{Input: strings.NewReader(c.in), Reader: ReaderConfig{Format: JSONL}, Output: out, Format: FormatNPY, Embedder: &fakeEmbedder{}})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %s", c.name, err, c.want)
		}
		st, err := runJob(t, &Job{Input: strings.NewReader(c.in), Reader: ReaderConfig{Format: JSONL}, Output: out, Format: FormatNPY, Embedder: &fakeEmbedder{}, SkipInvalid: true, Overwrite: true})
		if ids, _ := os.ReadFile(IDsPath(out)); err != nil || st.Invalid != 1 || string(ids) != `ok`+"\n" && c.name != "string and number" {
			t.Errorf("%s, skipped: %+v, %v, ids %q", c.name, st, err, ids)
		}
		// A JSONL output keeps every such id: they are distinct JSON.
		jout := filepath.Join(t.TempDir(), "v.jsonl")
		if st, err := runJob(t, &Job{Input: strings.NewReader(c.in), Reader: ReaderConfig{Format: JSONL}, Output: jout, Format: FormatJSONL, Embedder: &fakeEmbedder{}}); err != nil || st.Embedded != 2 {
			t.Errorf("%s to JSONL: %+v, %v", c.name, st, err)
		}
	}
}

// TestNPYResumesJSONIDs: a .npy output written before plain ids (header "), }", one
// JSON id a line: what JSONIDs writes, and what every .npy output held before issue
// 27) resumes: its rows are recognised, the rest is appended in its own form, and the
// result is byte-identical to an uninterrupted run of that form.
func TestNPYResumesJSONIDs(t *testing.T) {
	var in strings.Builder
	for i := range 100 {
		fmt.Fprintf(&in, `{"id":"doc-%03d","text":"text %d %s"}`+"\n", i, i, strings.Repeat("w", i%7))
	}
	input := in.String()
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.npy")
	if _, err := runJob(t, &Job{Input: strings.NewReader(input), Reader: ReaderConfig{Format: JSONL}, Output: ref, Format: FormatNPY, JSONIDs: true, Embedder: &fakeEmbedder{}, BatchSize: 8}); err != nil {
		t.Fatal(err)
	}
	refArr, _ := os.ReadFile(ref)
	refIDs, _ := os.ReadFile(IDsPath(ref))
	if !bytes.Contains(refArr[:npyHeaderLen], []byte("'shape': (100, 4), }")) || !strings.HasPrefix(string(refIDs), `"doc-000"`+"\n") {
		t.Fatalf("the fixture is not in the old form: header %q, ids %q…", refArr[:npyHeaderLen], refIDs[:20])
	}
	// An old run killed after 40 rows and a half-written 41st id.
	out := filepath.Join(dir, "out.npy")
	const row = testDim * 4
	partial := append([]byte(nil), refArr[:npyHeaderLen+40*row]...)
	lines := strings.SplitAfter(string(refIDs), "\n")
	os.WriteFile(out, partial, 0o644) // the header still says 100 rows: the size decides
	os.WriteFile(IDsPath(out), []byte(strings.Join(lines[:40], "")+`"doc-0`), 0o644)
	st, err := runJob(t, &Job{Input: strings.NewReader(input), Reader: ReaderConfig{Format: JSONL}, Output: out, Format: FormatNPY, Embedder: &fakeEmbedder{}, BatchSize: 8})
	if err != nil || st.Resumed != 40 || st.Embedded != 60 || st.Dropped != 0 {
		t.Fatalf("resume: %+v, %v; want 40 resumed and 60 embedded", st, err)
	}
	requireSameFiles(t, ref, out)
	requireSameFiles(t, IDsPath(ref), IDsPath(out))
}

// TestMergeReadsJSONIDParts: merge reads parts of either ids form (a shard finished by
// an older version beside shards run by this one) and writes plain ids: the result is
// byte-identical to one plain run over the whole input.
func TestMergeReadsJSONIDParts(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(jsonlCorpus(120)), 0o644)
	single := filepath.Join(dir, "single.npy")
	if _, err := runJob(t, &Job{Input: strings.NewReader(jsonlCorpus(120)), Reader: ReaderConfig{Format: JSONL}, Output: single, Format: FormatNPY, Embedder: &fakeEmbedder{}, BatchSize: 7}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(in)
	defer f.Close()
	fi, _ := f.Stat()
	out := filepath.Join(dir, "v.npy")
	var parts []string
	for i := range 3 {
		si, err := OpenShard(f, fi.Size(), Shard{i, 3})
		if err != nil {
			t.Fatal(err)
		}
		part := ShardPath(out, Shard{i, 3})
		parts = append(parts, part)
		if _, err := runJob(t, &Job{Input: si.Reader(f), Reader: ReaderConfig{Format: JSONL, FirstLine: si.FirstLine}, Output: part, Format: FormatNPY,
			JSONIDs: i == 1, Embedder: &fakeEmbedder{}, BatchSize: 7}); err != nil {
			t.Fatal(err)
		}
	}
	if ids, _ := os.ReadFile(IDsPath(parts[1])); !strings.HasPrefix(string(ids), `"d`) {
		t.Fatalf("part 1's ids %q… are not JSON", ids[:10])
	}
	if st, err := runMerge(t, in, out, FormatNPY, parts, Merge{}); err != nil || st.Rows != 120 {
		t.Fatalf("merge: %+v, %v", st, err)
	}
	requireSameFiles(t, single, out)
	requireSameFiles(t, IDsPath(single), IDsPath(out))
}

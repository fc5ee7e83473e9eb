package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rowsOf returns an output's records as (id, vector bytes) pairs, from JSONL lines or
// from the .npy rows and their ids.
func rowsOf(t *testing.T, path string, format Format) (ids []string, vecs []string) {
	t.Helper()
	if format == FormatJSONL {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.SplitAfter(string(b), "\n") {
			if line == "" {
				continue
			}
			id, _, err := parseJSONLRecord([]byte(strings.TrimSuffix(line, "\n")))
			if err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			ids, vecs = append(ids, string(id)), append(vecs, line[strings.Index(line, `"embedding"`):])
		}
		return ids, vecs
	}
	rows, dim, data := readNPY(t, path)
	b, _ := os.ReadFile(IDsPath(path))
	ids = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if rows == 0 {
		ids = nil
	}
	// As JSON, whatever the ids file's form, so that they compare with the input's.
	h, _ := os.ReadFile(path)
	for i, l := range ids {
		id, err := lineID([]byte(l), npyIDsForm(h))
		if err != nil {
			t.Fatalf("%s: ids line %d: %v", IDsPath(path), i+1, err)
		}
		ids[i] = string(id)
	}
	if len(ids) != rows {
		t.Fatalf("%s: %d rows and %d ids", path, rows, len(ids))
	}
	for r := range rows {
		vecs = append(vecs, fmt.Sprint(data[r*dim:(r+1)*dim]))
	}
	return ids, vecs
}

// writeRows replaces an output's records with the given rows of another output of the
// same format (row indexes into ids/vecs of rowsOf's raw form), keeping the .npy header
// consistent, as a person editing the file, or a botched copy, would leave it.
func rewriteRows(t *testing.T, path string, format Format, order []int, foreign map[int]string) {
	t.Helper()
	if format == FormatJSONL {
		b, _ := os.ReadFile(path)
		lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
		var out strings.Builder
		for k, i := range order {
			line := lines[i]
			if !strings.HasSuffix(line, "\n") {
				line += "\n"
			}
			if id, ok := foreign[k]; ok {
				line = `{"id":` + id + line[strings.Index(line, `,"embedding"`):]
			}
			out.WriteString(line)
		}
		os.WriteFile(path, []byte(out.String()), 0o644)
		return
	}
	b, _ := os.ReadFile(path)
	idb, _ := os.ReadFile(IDsPath(path))
	idLines := strings.SplitAfter(strings.TrimSuffix(string(idb), "\n"), "\n")
	row := testDim * 4
	form := npyIDsForm(b)
	data := append([]byte(nil), npyHeader(int64(len(order)), testDim, form)...)
	var ids strings.Builder
	for k, i := range order {
		data = append(data, b[npyHeaderLen+i*row:npyHeaderLen+(i+1)*row]...)
		id := strings.TrimSuffix(idLines[i], "\n")
		if f, ok := foreign[k]; ok {
			l, err := idLine(json.RawMessage(f), form)
			if err != nil {
				t.Fatal(err)
			}
			id = string(l)
		}
		ids.WriteString(id + "\n")
	}
	os.WriteFile(path, data, 0o644)
	os.WriteFile(IDsPath(path), []byte(ids.String()), 0o644)
}

// TestJobResumeRepairs: a partial output whose rows were swapped, duplicated or given
// ids the input does not hold is resumed into an output holding every input id exactly
// once with its own vector. Duplicates and foreign rows are dropped when the run
// completes, so the result is byte-identical to an uninterrupted run; swapped rows keep
// their place and the rest is appended. Before the fix the resume exited 0 with ids
// written twice (issue 15).
func TestJobResumeRepairs(t *testing.T) {
	const n, done = 200, 60
	input := corpus(n)
	for _, format := range []Format{FormatJSONL, FormatNPY} {
		dir := t.TempDir()
		ref := filepath.Join(dir, "ref."+format.String())
		if _, err := runJob(t, &Job{Input: strings.NewReader(input), Output: ref, Format: format, Embedder: &fakeEmbedder{}, BatchSize: 10}); err != nil {
			t.Fatal(err)
		}
		refIDs, refVecs := rowsOf(t, ref, format)
		seq := func(from, to int) []int {
			var s []int
			for i := from; i < to; i++ {
				s = append(s, i)
			}
			return s
		}
		tests := []struct {
			name      string
			order     []int          // rows of the reference kept, in this order
			foreign   map[int]string // rows (by position in order) given another id
			dropped   int64
			identical bool // byte-identical to the reference after the resume
		}{
			{"swapped", append(append(seq(0, 20), 21, 20), seq(22, done)...), nil, 0, false},
			{"duplicated", append(append(seq(0, 31), 30), seq(31, done)...), nil, 1, true},
			{"duplicated last", append(seq(0, done), 3, 7), nil, 2, true},
			{"foreign", append(append(seq(0, 10), 10), seq(10, done)...), map[int]string{10: `"zz"`}, 1, true},
			{"foreign and duplicate of a foreign", append(append(seq(0, 10), 10, 10), seq(10, done)...), map[int]string{10: "9999", 11: "9999"}, 2, true},
		}
		for _, tt := range tests {
			t.Run(format.String()+"/"+tt.name, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "out."+format.String())
				b, _ := os.ReadFile(ref)
				os.WriteFile(out, b, 0o644)
				if format == FormatNPY {
					b, _ := os.ReadFile(IDsPath(ref))
					os.WriteFile(IDsPath(out), b, 0o644)
				}
				rewriteRows(t, out, format, tt.order, tt.foreign)
				emb := &fakeEmbedder{}
				st, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: format, Embedder: emb, BatchSize: 10})
				if err != nil {
					t.Fatal(err)
				}
				if st.Dropped != tt.dropped {
					t.Errorf("dropped %d rows, want %d", st.Dropped, tt.dropped)
				}
				ids, vecs := rowsOf(t, out, format)
				if len(ids) != n {
					t.Fatalf("%d rows after the resume, want %d (each id once)", len(ids), n)
				}
				seen := map[string]bool{}
				for i, id := range ids {
					if seen[id] {
						t.Fatalf("id %s twice", id)
					}
					seen[id] = true
					j := slices.Index(refIDs, id)
					if j < 0 || vecs[i] != refVecs[j] {
						t.Fatalf("row %d: id %s with vector %s; want the reference's %v", i, id, vecs[i], j)
					}
				}
				if tt.identical {
					requireSameFiles(t, ref, out)
					if format == FormatNPY {
						requireSameFiles(t, IDsPath(ref), IDsPath(out))
					}
				}
				// A second resume finds nothing to do and changes nothing.
				before, _ := os.ReadFile(out)
				st2, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: format, Embedder: &fakeEmbedder{}, BatchSize: 10})
				after, _ := os.ReadFile(out)
				if err != nil || st2.Embedded != 0 || st2.Dropped != 0 || st2.Resumed != n || !bytes.Equal(before, after) {
					t.Errorf("second resume: %+v, err %v, output changed: %v", st2, err, !bytes.Equal(before, after))
				}
			})
		}
	}
}

// TestJobDuplicateInputIDs: an id on two input lines is refused at the second, naming
// both lines, or skipped and counted with SkipInvalid (issue 16).
func TestJobDuplicateInputIDs(t *testing.T) {
	in := `{"id":"a","text":"one"}` + "\n" + `{"id":"b","text":"two"}` + "\n" + `{"id":"a","text":"three"}` + "\n" + `{"id":"c","text":"four"}` + "\n"
	out := filepath.Join(t.TempDir(), "v.jsonl")
	_, err := runJob(t, &Job{Input: strings.NewReader(in), Output: out, Reader: ReaderConfig{Format: JSONL}, Embedder: &fakeEmbedder{}})
	want := `input line 3 repeats the id "a" of line 1: every id must be unique, since the output holds each id once (fix the input, or pass --skip-invalid to skip such lines)`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	st, err := runJob(t, &Job{Input: strings.NewReader(in), Output: out, Reader: ReaderConfig{Format: JSONL}, Embedder: &fakeEmbedder{}, SkipInvalid: true})
	if err != nil || st.Invalid != 1 || outputIDs(t, out) != `"a" "b" "c"` {
		t.Fatalf("with SkipInvalid: %+v, ids %s, err %v; want ids a b c and 1 invalid", st, outputIDs(t, out), err)
	}
	// The kept vector of "a" is line 1's.
	if got, _ := os.ReadFile(out); !strings.HasPrefix(string(got), `{"id":"a","embedding":[3,`) {
		t.Errorf("first record %q, want line 1's text (3 bytes)", firstLine(got))
	}
}

// TestFinishRepair: a .npy repair killed before its commit marker leaves the old pair
// (the copies are removed); one killed after it is rolled forward, both files.
func TestFinishRepair(t *testing.T) {
	for _, committed := range []bool{false, true} {
		t.Run(fmt.Sprint("committed=", committed), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "v.npy")
			os.WriteFile(p, []byte("old array"), 0o644)
			os.WriteFile(IDsPath(p), []byte("old ids"), 0o644)
			os.WriteFile(repairPath(p), []byte("new array"), 0o644)
			os.WriteFile(repairPath(IDsPath(p)), []byte("new ids"), 0o644)
			if committed {
				os.WriteFile(commitPath(p), nil, 0o644)
				// The kill came between the two renames.
				os.Rename(repairPath(p), p)
			}
			if err := finishRepair(p, FormatNPY); err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(p)
			ids, _ := os.ReadFile(IDsPath(p))
			want := "old array|old ids"
			if committed {
				want = "new array|new ids"
			}
			if got := string(a) + "|" + string(ids); got != want {
				t.Errorf("files %q, want %q", got, want)
			}
			for _, q := range []string{repairPath(p), repairPath(IDsPath(p)), commitPath(p)} {
				if _, err := os.Stat(q); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is left behind", filepath.Base(q))
				}
			}
		})
	}
}

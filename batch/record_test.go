package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// sameJob compares two records but for FirstText, which a run adds.
func sameJob(a, b *JobRecord) bool { return a.Model == b.Model && len(a.Differences(b)) == 0 }

func testRecord() *JobRecord {
	return &JobRecord{Model: "models/tiny.gguf", ModelSHA256: strings.Repeat("ab", 32), Weights: "BF16", Pooling: "last",
		InputType: "document", Prompt: "", Dimensions: testDim}
}

// TestJobRecordResume: a job keeps its JobRecord beside its output; resuming it
// with the same record goes on, with another model or settings is refused before
// anything is embedded or written, naming each difference; an output without a
// record (an older embed-stack's) is resumed and given one; --overwrite starts
// over with the new record.
func TestJobRecordResume(t *testing.T) {
	input := corpus(100)
	for _, format := range []Format{FormatJSONL, FormatNPY} {
		t.Run(format.String(), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out."+format.String())
			half := strings.Join(strings.SplitAfter(input, "\n")[:50], "")
			if _, err := runJob(t, &Job{Input: strings.NewReader(half), Output: out, Format: format, Embedder: &fakeEmbedder{}, Record: testRecord()}); err != nil {
				t.Fatal(err)
			}
			if got, err := ReadRecord(RecordPath(out)); err != nil || got == nil || !sameJob(got, testRecord()) {
				t.Fatalf("record beside the output: %+v, %v", got, err)
			}
			before, _ := os.ReadFile(out)

			other := testRecord()
			other.ModelSHA256, other.InputType, other.Prompt = strings.Repeat("cd", 32), "query", "Instruct: x\nQuery:"
			emb := &fakeEmbedder{}
			_, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: format, Embedder: emb, Record: other})
			want := `holds vectors of another job: model_sha256 abababababab (this job: cdcdcdcdcdcd), input_type document (this job: query), prompt "" (this job: "Instruct: x\nQuery:")`
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--overwrite") {
				t.Fatalf("resume with another model: %v\nwant it refused: %s", err, want)
			}
			if after, _ := os.ReadFile(out); !bytes.Equal(before, after) || emb.calls.Load() != 0 {
				t.Errorf("the refused resume changed the output or embedded (%d calls)", emb.calls.Load())
			}

			// The same job resumes.
			st, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: format, Embedder: &fakeEmbedder{}, Record: testRecord()})
			if err != nil || st.Resumed != 50 || st.Embedded != 50 {
				t.Fatalf("resume of the same job: %+v, %v", st, err)
			}

			// Without a record: resumed, and given this job's.
			os.Remove(RecordPath(out))
			if st, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: format, Embedder: &fakeEmbedder{}, Record: other}); err != nil || st.Resumed != 100 {
				t.Fatalf("resume without a record: %+v, %v", st, err)
			}
			if got, _ := ReadRecord(RecordPath(out)); got == nil || !sameJob(got, other) {
				t.Errorf("record after resuming an output without one: %+v, want this job's", got)
			}

			// --overwrite starts over with the new job's record.
			if st, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: format, Embedder: &fakeEmbedder{}, Record: testRecord(), Overwrite: true}); err != nil || st.Embedded != 100 {
				t.Fatalf("overwrite: %+v, %v", st, err)
			}
			if got, _ := ReadRecord(RecordPath(out)); got == nil || !sameJob(got, testRecord()) {
				t.Errorf("record after --overwrite: %+v", got)
			}
		})
	}
}

// TestMergeRecords: a merge keeps the parts' JobRecord (beside a JSONL output, in a
// Parquet output's metadata), refuses parts of two jobs, and a .parquet job's
// finished output of another job is refused rather than taken as done.
func TestMergeRecords(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(jsonlCorpus(30)), 0o644)
	out := filepath.Join(dir, "v.jsonl")
	parts := make([]string, 3)
	for i := range parts {
		parts[i] = ShardPath(out, Shard{i, 3})
	}
	runShards(t, in, out, FormatJSONL, 3)
	for _, p := range parts {
		if err := WriteRecord(RecordPath(p), testRecord()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runMerge(t, in, out, FormatJSONL, parts, Merge{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadRecord(RecordPath(out)); got == nil || !sameJob(got, testRecord()) {
		t.Errorf("merged output's record %+v, want the parts'", got)
	}
	pq := filepath.Join(dir, "v.parquet")
	if _, err := runMerge(t, in, pq, FormatParquet, parts, Merge{}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pq)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	pf, err := parquet.OpenFile(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := pf.Lookup(parquetRecordKey)
	f.Close()
	var got JobRecord
	if json.Unmarshal([]byte(meta), &got) != nil || !sameJob(&got, testRecord()) {
		t.Errorf("Parquet metadata %s = %q, want the parts' record", parquetRecordKey, meta)
	}

	// A part of another job.
	other := testRecord()
	other.Pooling = "mean"
	WriteRecord(RecordPath(parts[2]), other)
	_, err = runMerge(t, in, filepath.Join(dir, "w.jsonl"), FormatJSONL, parts, Merge{Overwrite: true})
	if err == nil || !strings.Contains(err.Error(), "pooling mean (this job: last)") || !strings.Contains(err.Error(), parts[2]) {
		t.Errorf("merge of parts of two jobs: %v, want it refused naming the part and the pooling", err)
	}

	// A finished .parquet output of another job is not done for this one.
	m := &Merge{Output: pq, Record: other}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if done, _, err := m.Finished(ctx); done || err == nil || !strings.Contains(err.Error(), "pooling last (this job: mean)") {
		t.Errorf("Finished with another job's record: done %t, %v", done, err)
	}
}

// TestJobRefusesAnotherInput: resuming an output with an input none of whose first
// items it holds (a mistyped --input) is refused before anything is embedded, and
// the output keeps its rows; an input whose first items were removed (or new ones
// put first) resumes as before.
func TestJobRefusesAnotherInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	ids := func(from, to int) string {
		var b strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, `{"id":"d%d","text":"text %d"}`+"\n", i, i)
		}
		return b.String()
	}
	jsonl := ReaderConfig{Format: JSONL}
	if _, err := runJob(t, &Job{Input: strings.NewReader(ids(0, 50)), Reader: jsonl, Output: out, Format: FormatJSONL, Embedder: &fakeEmbedder{}}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(out)
	for _, tc := range []struct{ name, input, want string }{
		{"short input", ids(100, 103), "the output holds 50 rows from an earlier run, and none of the input's first 3 items (lines 1 to 3) is among them"},
		{"long input", ids(100, 3000), "the output holds 50 rows from an earlier run, and none of the input's first 50 items (lines 1 to 50) is among them"},
	} {
		emb := &fakeEmbedder{}
		_, err := runJob(t, &Job{Input: strings.NewReader(tc.input), Reader: jsonl, Output: out, Format: FormatJSONL, Embedder: emb, BatchSize: 7})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--overwrite") {
			t.Errorf("%s: %v\nwant %s", tc.name, err, tc.want)
		}
		if after, _ := os.ReadFile(out); !bytes.Equal(before, after) || emb.calls.Load() != 0 {
			t.Errorf("%s: the refused run changed the output or embedded (%d calls)", tc.name, emb.calls.Load())
		}
	}
	// Lines of another file: their ids (line numbers) are the output's, their
	// first text is not.
	lines := filepath.Join(dir, "lines.jsonl")
	if _, err := runJob(t, &Job{Input: strings.NewReader(corpus(30)), Output: lines, Format: FormatJSONL, Embedder: &fakeEmbedder{}, Record: testRecord()}); err != nil {
		t.Fatal(err)
	}
	emb := &fakeEmbedder{}
	_, err := runJob(t, &Job{Input: strings.NewReader("another first line\n" + corpus(30)), Output: lines, Format: FormatJSONL, Embedder: emb, Record: testRecord()})
	if err == nil || !strings.Contains(err.Error(), "the input's first item (line 1) is not the text the output's first row was made from") || emb.calls.Load() != 0 {
		t.Errorf("lines of another input: %v (%d calls)", err, emb.calls.Load())
	}
	if st, err := runJob(t, &Job{Input: strings.NewReader(corpus(40)), Output: lines, Format: FormatJSONL, Embedder: &fakeEmbedder{}, Record: testRecord()}); err != nil || st.Resumed != 30 {
		t.Errorf("the same lines and more: %+v, %v", st, err)
	}

	// Ten new items first, then the output's from its tenth on: resumed, the first
	// ten rows dropped as not in the input.
	st, err := runJob(t, &Job{Input: strings.NewReader(ids(200, 210) + ids(10, 60)), Reader: jsonl, Output: out, Format: FormatJSONL, Embedder: &fakeEmbedder{}, BatchSize: 3})
	if err != nil || st.Resumed != 40 || st.Embedded != 20 || st.Dropped != 10 {
		t.Errorf("edited input: %+v, %v; want 40 resumed, 20 embedded, 10 dropped", st, err)
	}
}

// Pass-through names a Parquet output cannot take are refused, each in its own
// words; and a finished .parquet output with other pass-through columns is not
// done for a run that asks for others.
func TestPassthroughChecks(t *testing.T) {
	for names, want := range map[string]string{
		"title,title": `--passthrough names the field "title" twice`,
		"title,id":    `--passthrough id: the output has a column "id" of its own (the item's id)`,
		"embedding":   `--passthrough embedding: the output has a column "embedding" of its own (the item's vector)`,
	} {
		if err := CheckPassthrough(strings.Split(names, ",")); err == nil || err.Error() != want+"; pass-through fields are the input's others" && err.Error() != want {
			t.Errorf("%s: %v, want %s", names, err, want)
		}
	}
	if err := CheckPassthrough([]string{"title", "n"}); err != nil {
		t.Error(err)
	}

	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(jsonlCorpus(12)), 0o644)
	out := filepath.Join(dir, "v.parquet")
	runShards(t, in, out, FormatNPY, 1)
	part := WorkPath(ShardPath(out, Shard{0, 1}))
	if _, err := runMerge(t, in, out, FormatParquet, []string{part}, Merge{Passthrough: []string{"title"}}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(in)
	defer f.Close()
	fi, _ := f.Stat()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		fields []string
		done   bool
	}{{[]string{"title"}, true}, {[]string{"title", "n"}, false}, {nil, false}} {
		m := &Merge{Input: f, InputSize: fi.Size(), Reader: ReaderConfig{Format: JSONL}, Output: out, Passthrough: tc.fields, Logger: quietLogger()}
		done, _, err := m.Finished(ctx)
		if done != tc.done || (!tc.done && (err == nil || !strings.Contains(err.Error(), "pass-through columns"))) {
			t.Errorf("Finished asking for %q: done %t, %v", tc.fields, done, err)
		}
	}
}

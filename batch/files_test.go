package batch

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCheckFiles: the input is found among the run's files by identity, whatever
// the name (issue 28: "./s.jsonl", a symbolic and a hard link wiped the input), and
// a shard's part may not be another shard's.
func TestCheckFiles(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	in := filepath.Join(dir, "s.jsonl")
	os.WriteFile(in, []byte(`{"id":1,"text":"a"}`+"\n"), 0o644)
	os.Symlink("s.jsonl", filepath.Join(dir, "link.jsonl"))
	os.Link(in, filepath.Join(dir, "hard.jsonl"))
	os.Symlink("s.jsonl", filepath.Join(dir, "v.npy.ids"))
	fi, _ := os.Stat(in)
	tests := []struct {
		name, output string
		shard        Shard
		want         string
	}{
		{"same name", "s.jsonl", Shard{}, "the input (s.jsonl) and the output (s.jsonl) are the same file"},
		{"dot slash", "./s.jsonl", Shard{}, "the input (s.jsonl) and the output (./s.jsonl) are the same file"},
		{"absolute", in, Shard{}, "the input (s.jsonl) and the output (" + in + ") are the same file"},
		{"symbolic link", "link.jsonl", Shard{}, "the input (s.jsonl) and the output (link.jsonl) are the same file"},
		{"hard link", "hard.jsonl", Shard{}, "the input (s.jsonl) and the output (hard.jsonl) are the same file"},
		{"npy ids sidecar", "v.npy", Shard{}, "the input (s.jsonl) and the output's work file (v.npy.ids) are the same file"},
		{"other", "out.jsonl", Shard{}, ""},
		{"stdout", "-", Shard{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckFiles(fi, "s.jsonl", tt.output, tt.shard, false)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to start %q", err, tt.want)
			}
		})
	}

	// Shard 1's part is a link to shard 0's (which does not exist yet: resolved path).
	os.Symlink("p-00000-of-00002.jsonl", filepath.Join(dir, "p-00001-of-00002.jsonl"))
	err := CheckFiles(fi, "s.jsonl", "p.jsonl", Shard{Index: 1, Count: 2}, false)
	if want := "the output (p-00001-of-00002.jsonl) and shard 0's part (p-00000-of-00002.jsonl) are the same file"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	// Standard input redirected from a character device is no file to protect.
	null, _ := os.Stat(os.DevNull)
	if err := CheckFiles(null, "standard input", os.DevNull, Shard{}, false); err != nil {
		t.Fatal(err)
	}
}

// TestCheckFilesParquet: an existing .parquet output that is not ours is refused
// unless overwrite, and so is one that is not a regular file.
func TestCheckFilesParquet(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "v.parquet")
	os.WriteFile(out, []byte("precious notes\n"), 0o644)
	err := CheckFiles(nil, "", out, Shard{}, false)
	if err == nil || !strings.Contains(err.Error(), "exists and is not an output of embed-stack") || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("err = %v", err)
	}
	if err := CheckFiles(nil, "", out, Shard{}, true); err != nil {
		t.Fatal(err)
	}
	os.Remove(out)
	os.Symlink(os.DevNull, out)
	if err := CheckFiles(nil, "", out, Shard{}, true); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Fatalf("err = %v", err)
	}
}

// TestResumeRefusesUnrelatedFiles: an output that is not this job's is refused
// whole, never cut, however it ends (issue 28: a one-line file without a newline
// was replaced by the vectors).
func TestResumeRefusesUnrelatedFiles(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{
		`{"important":"data"}`,
		`{"important":"data"}` + "\n",
		"a",
		`{"id":"x","embedding":[1,2,3,4]}` + "\n" + `{"id":"y","embedding":[1,2,oops`,
		`{"id":"x" ,"embedding":[`,
	} {
		p := filepath.Join(dir, "out.jsonl")
		os.WriteFile(p, []byte(content), 0o644)
		_, err := runJob(t, &Job{Input: strings.NewReader("x\n"), Output: p, Format: FormatJSONL, Embedder: &fakeEmbedder{}})
		if err == nil || !strings.Contains(err.Error(), "--overwrite") {
			t.Errorf("%q: err = %v, want a refusal", content, err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("%q: the file became %q", content, b)
		}
	}
	// Partly written records of this job are still cut and resumed.
	for _, tail := range []string{`{`, `{"id":`, `{"id":"y`, `{"id":"y\"`, `{"id":2`, `{"id":2,"embedding":[`, `{"id":2,"embedding":[1.5,-2e-07,`, `{"id":2,"embedding":[1,2,3,4]}`} {
		p := filepath.Join(dir, "resume.jsonl")
		first := `{"id":1,"embedding":[` + floats(fakeVector("a")) + "]}\n"
		os.WriteFile(p, []byte(first+tail), 0o644)
		if _, err := runJob(t, &Job{Input: strings.NewReader("a\nb\n"), Output: p, Format: FormatJSONL, Embedder: &fakeEmbedder{}}); err != nil {
			t.Errorf("tail %q: %v", tail, err)
		}
		if b, _ := os.ReadFile(p); string(b) != wantJSONL("a\nb\n", nil) {
			t.Errorf("tail %q: output %q", tail, b)
		}
	}
}

func floats(v []float32) string {
	var b []byte
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
	}
	return string(b)
}

// TestResumeBoundedRead: an output without newlines is refused after at most one
// record's worth of bytes, not read whole into memory (issue 28: 300 MB took 1 GB).
func TestResumeBoundedRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.jsonl")
	// A record's start, then more bytes than any record: 8 MiB over a 4 MiB bound.
	big := []byte(`{"id":"` + strings.Repeat("x", 8<<20))
	os.WriteFile(p, big, 0o644)
	_, err := runJob(t, &Job{Input: strings.NewReader("x\n"), Reader: ReaderConfig{MaxLineBytes: 4 << 20}, Output: p, Format: FormatJSONL, Embedder: &fakeEmbedder{}})
	if err == nil || !strings.Contains(err.Error(), "is longer than 4194432 bytes") {
		t.Fatalf("err = %v", err)
	}
	// Not a record's start: refused at the first megabyte.
	os.WriteFile(p, []byte(strings.Repeat("y", 3<<20)), 0o644)
	_, err = runJob(t, &Job{Input: strings.NewReader("x\n"), Output: p, Format: FormatJSONL, Embedder: &fakeEmbedder{}})
	if err == nil || !strings.Contains(err.Error(), `line 1 begins "yyyy`) {
		t.Fatalf("err = %v", err)
	}
	// A .npy whose ids file has no newline.
	np := filepath.Join(dir, "v.npy")
	os.WriteFile(np, append(npyHeader(1, testDim, idsJSON), make([]byte, 4*testDim)...), 0o644)
	os.WriteFile(IDsPath(np), []byte(`"`+strings.Repeat("z", 6<<20)), 0o644)
	_, err = runJob(t, &Job{Input: strings.NewReader("x\n"), Reader: ReaderConfig{MaxLineBytes: 4 << 20}, Output: np, Format: FormatNPY, Embedder: &fakeEmbedder{}})
	if err == nil || !strings.Contains(err.Error(), "longer than any this job writes") {
		t.Fatalf("err = %v", err)
	}
}

// TestStreamOutputs: an output that is not a regular file is written as a stream,
// never read back; a .npy refuses one.
func TestStreamOutputs(t *testing.T) {
	if _, err := runJob(t, &Job{Input: strings.NewReader(corpus(100)), Output: os.DevNull, Format: FormatJSONL, Embedder: &fakeEmbedder{}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "v.npy")
	os.Symlink(os.DevNull, link)
	_, err := runJob(t, &Job{Input: strings.NewReader("x\n"), Output: link, Format: FormatNPY, Embedder: &fakeEmbedder{}})
	if err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Fatalf("err = %v", err)
	}
	// Ids beside no array are not this job's: not truncated.
	np := filepath.Join(dir, "w.npy")
	os.WriteFile(IDsPath(np), []byte("keep me\n"), 0o644)
	_, err = runJob(t, &Job{Input: strings.NewReader("x\n"), Output: np, Format: FormatNPY, Embedder: &fakeEmbedder{}})
	if err == nil || !strings.Contains(err.Error(), "holds data but") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(IDsPath(np)); string(b) != "keep me\n" {
		t.Fatalf("ids file became %q", b)
	}
}

// TestReaderRepeatedKeys: a line holding the id, text or a passthrough field twice is
// refused, as the HTTP API refuses such bodies; other repeated keys pass.
func TestReaderRepeatedKeys(t *testing.T) {
	for _, tt := range []struct{ line, want string }{
		{`{"id":1,"text":"a","text":"b"}`, `input line 1 holds the key "text" more than once`},
		{`{"id":1,"id":2,"text":"a"}`, `input line 1 holds the key "id" more than once`},
		{`{"id":1,"t\u0065xt":"a","text":"b"}`, `input line 1 holds the key "text" more than once`},
		{`{"id":1,"text":"a","title":"x","title":"y"}`, `input line 1 holds the key "title" more than once`},
		{`{"id":1,"text":"a","other":1,"other":2}`, ``},
		{`{"id":1,"text":"a","Text":"b"}`, ``},
	} {
		r := NewReader(strings.NewReader(tt.line+"\n"), ReaderConfig{Format: JSONL, Fields: []string{"title"}})
		it, err := r.Next()
		if tt.want == "" {
			if err != nil || it.Text != "a" {
				t.Errorf("%s: %+v, %v", tt.line, it, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.line, err, tt.want)
		}
	}
}

// TestTextIDs: with TextIDs the ids "7" and 7 are one id, refused at the second
// (issue 28: a Parquet output held two rows with the id 7).
func TestTextIDs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "v.parquet.npy")
	_, err := runJob(t, &Job{Input: strings.NewReader(`{"id":"7","text":"a"}` + "\n" + `{"id":7,"text":"b"}` + "\n"), Reader: ReaderConfig{Format: JSONL}, Output: p, Format: FormatNPY, TextIDs: true, Embedder: &fakeEmbedder{}})
	if want := `input line 2 repeats the id 7 of line 1 (as text, which a .parquet or .npy output holds: "7" and 7 are one id there)`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// TestMergeRefusesToDestroy: merge X→X, an output that is a part, and an existing
// output that is not ours are refused, writing nothing (issue 28: X→X replaced the
// corpus with vectors).
func TestMergeRefusesToDestroy(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	corpus := jsonlCorpus(20)
	os.WriteFile(in, []byte(corpus), 0o644)
	out := filepath.Join(dir, "v.jsonl")
	runShards(t, in, out, FormatJSONL, 2)
	parts := []string{ShardPath(out, Shard{0, 2}), ShardPath(out, Shard{1, 2})}
	for _, tt := range []struct {
		name, output string
		parts        []string
		want         string
	}{
		{"input", in, parts, "the input (--input) and the output (" + in + ") are the same file"},
		{"part", parts[1], parts, "the output (" + parts[1] + ") and part 1 (" + parts[1] + ") are the same file"},
		{"same part twice", out, []string{parts[0], parts[0]}, "part 0 (" + parts[0] + ") and part 1 (" + parts[0] + ") are the same file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runMerge(t, in, tt.output, FormatJSONL, tt.parts, Merge{})
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if b, _ := os.ReadFile(in); string(b) != corpus {
				t.Fatal("the input changed")
			}
		})
	}
	notes := filepath.Join(dir, "notes.jsonl")
	os.WriteFile(notes, []byte(`{"important":"data"}`), 0o644)
	_, err := runMerge(t, in, notes, FormatJSONL, parts, Merge{})
	if err == nil || !strings.Contains(err.Error(), "exists and is not an output of embed-stack") {
		t.Fatalf("err = %v", err)
	}
	if _, err := runMerge(t, in, notes, FormatJSONL, parts, Merge{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	// A merged output is ours: merging again replaces it.
	if _, err := runMerge(t, in, notes, FormatJSONL, parts, Merge{}); err != nil {
		t.Fatal(err)
	}
}

// TestMergeCrossShardDuplicate: an id on a line of each of two slices gets a vector
// in each part; merge names both lines and advice that works (issue 28: it was never
// reported, and the advice "rerun that shard with --overwrite" gave the same error).
func TestMergeCrossShardDuplicate(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	corpus := jsonlCorpus(20) + `{"id":"d3","text":"again"}` + "\n"
	os.WriteFile(in, []byte(corpus), 0o644)
	out := filepath.Join(dir, "v.npy")
	runShards(t, in, out, FormatNPY, 2)
	parts := []string{ShardPath(out, Shard{0, 2}), ShardPath(out, Shard{1, 2})}
	_, err := runMerge(t, in, out, FormatNPY, parts, Merge{})
	want := `input line 22 repeats the id "d3" of line 4: every id must be unique, since the output holds each id once; the shards embedded both lines, since each reads only its slice of the input. Give every item its own id, then run every shard again with --overwrite (the slices move when the input changes)`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	// The advice works: the fixed input, every shard again with Overwrite.
	fixed := jsonlCorpus(20) + `{"id":"d3b","text":"again"}` + "\n"
	os.WriteFile(in, []byte(fixed), 0o644)
	f, _ := os.Open(in)
	defer f.Close()
	fi, _ := f.Stat()
	for i := range 2 {
		si, _ := OpenShard(f, fi.Size(), Shard{i, 2})
		if _, err := runJob(t, &Job{Input: si.Reader(f), Reader: ReaderConfig{Format: JSONL, FirstLine: si.FirstLine}, Output: parts[i], Format: FormatNPY, Overwrite: true, Embedder: &fakeEmbedder{}, BatchSize: 7}); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := runMerge(t, in, out, FormatNPY, parts, Merge{}); err != nil || st.Rows != 21 {
		t.Fatalf("%+v, %v", st, err)
	}
}

// TestParquetFinished: a complete .parquet output is recognised against its input;
// one that lacks items or holds others is not.
func TestParquetFinished(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(jsonlCorpus(30)), 0o644)
	out := filepath.Join(dir, "v.parquet")
	runShards(t, in, out, FormatNPY, 1)
	if _, err := runMerge(t, in, out, FormatParquet, []string{WorkPath(ShardPath(out, Shard{0, 1}))}, Merge{}); err != nil {
		t.Fatal(err)
	}
	finished := func(m Merge) (bool, MergeStats, error) {
		f, _ := os.Open(in)
		defer f.Close()
		fi, _ := f.Stat()
		m.Input, m.InputSize, m.Output, m.Reader.Format, m.Logger = f, fi.Size(), out, JSONL, quietLogger()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return m.Finished(ctx)
	}
	if done, st, err := finished(Merge{}); !done || err != nil || st.Rows != 30 {
		t.Fatalf("%v %+v %v", done, st, err)
	}
	os.WriteFile(in, []byte(jsonlCorpus(31)), 0o644)
	if done, _, err := finished(Merge{}); done || err == nil || !strings.Contains(err.Error(), "1 input items have no row in it, the first on line") || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("%v %v", done, err)
	}
	os.WriteFile(in, []byte(jsonlCorpus(29)), 0o644)
	if done, _, err := finished(Merge{}); done || err == nil || !strings.Contains(err.Error(), "not the next item") {
		t.Fatalf("%v %v", done, err)
	}
	// A run under way (its work file exists) is not finished.
	os.WriteFile(in, []byte(jsonlCorpus(31)), 0o644)
	os.WriteFile(WorkPath(out), nil, 0o644)
	if done, _, err := finished(Merge{}); done || err != nil {
		t.Fatalf("%v %v", done, err)
	}
}

package batch

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestFilesOpen(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(input, []byte("a\nb\nc\nd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))

	// A shard reads its byte range from its first line and writes its part.
	o, err := Files{Input: input, Output: filepath.Join(dir, "out.jsonl"), Shard: Shard{Index: 1, Count: 2}, Logger: logger}.Open()
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(o.In)
	if string(text) != "c\nd\n" || o.Size != 4 || o.Reader.FirstLine != 3 || o.Output != filepath.Join(dir, "out-00001-of-00002.jsonl") || o.Work != o.Output {
		t.Errorf("shard 1/2: %q, size %d, first line %d, output %s, work %s", text, o.Size, o.Reader.FirstLine, o.Output, o.Work)
	}
	if done, err := o.Finished(context.Background()); done || err != nil {
		t.Errorf("Finished = %v, %v for a shard", done, err)
	}
	o.Close()
	if !strings.Contains(log.String(), `msg=shard shard=1/2 first_line=3 bytes=4 input_offset=4`) {
		t.Errorf("log:\n%s", log.String())
	}

	// A .parquet output is written through its work file; Finish of a shard's
	// .parquet part leaves it for Merge.
	o, err = Files{Input: input, Output: filepath.Join(dir, "v.parquet"), Logger: logger}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if o.Output != filepath.Join(dir, "v.parquet") || o.Work != WorkPath(o.Output) || o.Work == o.Output || o.Reader.FirstLine != 1 {
		t.Errorf(".parquet: output %s, work %s, first line %d", o.Output, o.Work, o.Reader.FirstLine)
	}
	o.Close()
	o, err = Files{Input: input, Output: filepath.Join(dir, "v.parquet"), Shard: Shard{Index: 0, Count: 2}, Logger: logger}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Finish(context.Background()); err != nil || !strings.Contains(log.String(), "once every shard is done, embed-stack merge writes the .parquet") {
		t.Errorf("Finish of a shard's part: %v\n%s", err, log.String())
	}
	o.Close()

	// Shards and .parquet read the input by offset: a pipe will not do.
	for _, f := range []Files{{Output: filepath.Join(dir, "p.parquet")}, {Output: "o.jsonl", Shard: Shard{Count: 2}}} {
		r, w, _ := os.Pipe()
		defer r.Close()
		defer w.Close()
		f.Input = "/dev/fd/" + strconv.Itoa(int(r.Fd()))
		if _, err := f.Open(); err == nil || !strings.Contains(err.Error(), "not a regular file, which --shard and .parquet need") {
			t.Errorf("%+v: %v", f, err)
		}
	}
	if _, err := (Files{Input: filepath.Join(dir, "absent"), Output: "o.jsonl"}).Open(); err == nil || !strings.HasPrefix(err.Error(), "--input: open ") {
		t.Errorf("absent input: %v", err)
	}
}

func TestResolveShard(t *testing.T) {
	for _, tt := range []struct {
		spec  string
		count int
		index string
		want  string // the shard or the error
	}{
		{"", 0, "", "0/0"},
		{"1/4", 0, "", "1/4"},
		{"1/4", 4, "3", "1/4"},
		{"", 4, "3", "3/4"},
		{"1/4", 3, "", "--shard 1/4 and --shards 3 disagree"},
		{"", -1, "", "--shards must not be negative"},
		{"", 4, "", "--shards 4 needs this run's index: set --shard i/4, or JOB_COMPLETION_INDEX (a Kubernetes Indexed Job sets it)"},
		{"", 4, "4", `JOB_COMPLETION_INDEX="4" with --shards 4: `},
	} {
		sh, err := ResolveShard(tt.spec, tt.count, tt.index)
		got := sh.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, tt.want) {
			t.Errorf("ResolveShard(%q, %d, %q) = %s, want %s", tt.spec, tt.count, tt.index, got, tt.want)
		}
	}
	for _, tt := range []struct{ name, input, want string }{
		{"auto", "a.jsonl", "jsonl"}, {"auto", "a.NDJSON", "jsonl"}, {"auto", "a.txt", "lines"}, {"auto", "-", "lines"},
		{"lines", "a.jsonl", "lines"}, {"JSONL", "a.txt", "jsonl"}, {"csv", "a.csv", `--input-format "csv": use lines, jsonl or auto`},
	} {
		f, err := ParseInputFormat(tt.name, tt.input)
		got := f.String()
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("ParseInputFormat(%q, %q) = %s, want %s", tt.name, tt.input, got, tt.want)
		}
	}
}

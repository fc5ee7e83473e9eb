package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// embedCosine is the least cosine between a vector from `embed` and the server's for
// the same text: the same tokens through the same engine, differing at most in float
// rounding where batches are composed differently.
const embedCosine = 0.99999

// corpusLines returns n distinct non-empty texts made from testdata/corpus: lines of
// Opticks, each joined with a later one so that no two texts are equal, plus the
// multilingual lines and one long text for the ephemeral worker.
func corpusLines(t testing.TB, n int) []string {
	t.Helper()
	root := e2e.RepoRoot(t)
	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(root, "testdata", "corpus", name))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	opticks := read("opticks.txt")
	texts := read("multilingual.txt")
	for i := 0; len(texts) < n; i++ {
		a, b := opticks[i%len(opticks)], opticks[(i*7919+13)%len(opticks)]
		texts = append(texts, fmt.Sprintf("%s %s (%d)", a, b, i))
	}
	return texts[:n]
}

func writeLines(t testing.TB, path string, lines []string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for _, l := range lines {
		w.WriteString(l)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

type jsonlRecord struct {
	ID        json.RawMessage `json:"id"`
	Embedding []float64       `json:"embedding"`
}

func readJSONL(t testing.TB, path string) []jsonlRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []jsonlRecord
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		var r jsonlRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("output line %d %.80q: %v", i+1, line, err)
		}
		out = append(out, r)
	}
	return out
}

// readNPYFile parses a .npy (format 1.0, '<f4', C order) independently of package
// batch and returns its rows.
func readNPYFile(t testing.TB, path string) [][]float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 10 || string(b[:8]) != "\x93NUMPY\x01\x00" {
		t.Fatalf("%s: no NumPy 1.0 magic", path)
	}
	hl := int(binary.LittleEndian.Uint16(b[8:10]))
	header := string(b[10 : 10+hl])
	if (10+hl)%64 != 0 || !strings.HasSuffix(header, "\n") {
		t.Fatalf("header %q: the data must start 64-byte aligned after a newline", header)
	}
	if !strings.Contains(header, "'descr': '<f4'") || !strings.Contains(header, "'fortran_order': False") {
		t.Fatalf("header %q: want '<f4' in C order", header)
	}
	var rows, dim int
	i := strings.Index(header, "'shape': (")
	if _, err := fmt.Sscanf(header[i+len("'shape': ("):], "%d, %d)", &rows, &dim); err != nil {
		t.Fatalf("header %q: %v", header, err)
	}
	data := b[10+hl:]
	if len(data) != rows*dim*4 {
		t.Fatalf("%d data bytes for shape (%d, %d)", len(data), rows, dim)
	}
	out := make([][]float64, rows)
	for r := range out {
		out[r] = make([]float64, dim)
		for c := range out[r] {
			out[r][c] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*(r*dim+c):])))
		}
	}
	return out
}

// runEmbedCmd runs `embed-stack embed args...` to completion and returns its output.
func runEmbedCmd(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"embed"}, args...)...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("embed-stack embed %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestEmbedMatchesServer: the batch job and the server give the same vectors for the
// same texts, as documents and as queries, native and truncated, for short inputs
// (warm worker) and long ones (ephemeral workers), to JSONL and to .npy.
func TestEmbedMatchesServer(t *testing.T) {
	bin, model := e2e.Paths(t)
	// A low warm limit sends the long text to ephemeral workers on both sides.
	const warmMax = "160"
	// One llama.cpp thread on both sides, as e2e.Serve uses (see there).
	srv := e2e.Serve(t, "--warm-max-tokens", warmMax)
	dir := t.TempDir()

	texts := corpusLines(t, 40)
	texts = append(texts, strings.Repeat("Light is refracted in passing out of one medium into another. ", 24))
	// JSONL input with string ids, custom field names.
	in := filepath.Join(dir, "in.jsonl")
	var b strings.Builder
	for i, s := range texts {
		line, _ := json.Marshal(map[string]any{"key": fmt.Sprintf("doc-%02d", i), "body": s, "other": i})
		b.Write(line)
		b.WriteByte('\n')
	}
	os.WriteFile(in, []byte(b.String()), 0o644)
	lines := filepath.Join(dir, "in.txt")
	writeLines(t, lines, texts)

	tests := []struct {
		name   string
		args   []string
		output string
		body   map[string]any
	}{
		{"documents jsonl", []string{"--input", in, "--id-field", "key", "--text-field", "body"}, "docs.jsonl", map[string]any{}},
		{"queries npy 48 dims", []string{"--input", lines, "--input-type", "query", "--instruction", "Find the optics passage", "--dimensions", "48"}, "queries.npy",
			map[string]any{"input_type": "query", "instruction": "Find the optics passage", "dimensions": 48}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(dir, tt.output)
			args := append([]string{"--model", model, "--output", out, "--batch-size", "8", "--warm-max-tokens", warmMax, "--threads", "1", "--log-format", "json"}, tt.args...)
			log := runEmbedCmd(t, bin, args...)
			if !strings.Contains(log, `"msg":"embedding done","embedded":41,"resumed":0,"invalid":0`) {
				t.Errorf("log lacks the summary with 41 embedded:\n%s", log)
			}
			body := tt.body
			body["input"] = texts
			body["model"] = "m"
			want := e2e.Embeddings(t, srv.URL, body)

			var got [][]float64
			if strings.HasSuffix(out, ".npy") {
				got = readNPYFile(t, out)
				ids, _ := os.ReadFile(out + ".ids")
				wantIDs := ""
				for i := range texts {
					wantIDs += strconv.Itoa(i+1) + "\n"
				}
				if string(ids) != wantIDs {
					t.Errorf("ids file %q, want line numbers 1..%d", ids, len(texts))
				}
				checkNPYWithNode(t, out, got)
			} else {
				for i, r := range readJSONL(t, out) {
					if want := fmt.Sprintf(`"doc-%02d"`, i); string(r.ID) != want {
						t.Errorf("record %d id %s, want %s", i, r.ID, want)
					}
					got = append(got, r.Embedding)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d vectors from embed, %d from the server", len(got), len(want))
			}
			for i := range want {
				if c := e2e.Cosine(got[i], want[i]); c < embedCosine || len(got[i]) != len(want[i]) {
					t.Errorf("text %d: %d dims, cosine %.7f with the server's %d dims; want ≥ %v", i, len(got[i]), c, len(want[i]), embedCosine)
				}
			}
		})
	}
}

// checkNPYWithNode loads the .npy with an independent reader in node (DataView over
// the file, header parsed from its text) and compares shape and row sums.
func checkNPYWithNode(t *testing.T, path string, rows [][]float64) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		e2e.Require(t, "node is not installed: the .npy cross-check needs it")
	}
	const script = `
const fs = require('fs');
const b = fs.readFileSync(process.argv[1]);
if (b.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error('magic');
const hl = b.readUInt16LE(8);
const header = b.toString('latin1', 10, 10 + hl);
const m = header.match(/'shape': \((\d+), (\d+)\)/);
const [rows, dim] = [Number(m[1]), Number(m[2])];
const dv = new DataView(b.buffer, b.byteOffset + 10 + hl);
const sums = [];
for (let r = 0; r < rows; r++) {
  let s = 0;
  for (let c = 0; c < dim; c++) s += dv.getFloat32(4 * (r * dim + c), true);
  sums.push(s);
}
console.log(JSON.stringify({ rows, dim, descr: header.match(/'descr': '([^']+)'/)[1], sums }));`
	out, err := exec.Command(node, "-e", script, path).CombinedOutput()
	if err != nil {
		t.Fatalf("node reading %s: %v\n%s", path, err, out)
	}
	var got struct {
		Rows, Dim int
		Descr     string
		Sums      []float64
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node output %q: %v", out, err)
	}
	if got.Rows != len(rows) || got.Dim != len(rows[0]) || got.Descr != "<f4" {
		t.Fatalf("node sees (%d, %d) %s, want (%d, %d) <f4", got.Rows, got.Dim, got.Descr, len(rows), len(rows[0]))
	}
	for r, row := range rows {
		var s float64
		for _, x := range row {
			s += x
		}
		if math.Abs(s-got.Sums[r]) > 1e-9 {
			t.Fatalf("row %d sums to %v in node, %v in Go", r, got.Sums[r], s)
		}
	}
}

// TestEmbedResume kills a running job (SIGKILL for JSONL: no chance to clean up;
// SIGINT for .npy: a graceful stop), reruns the same command, and requires every id
// exactly once, in input order, with the vectors of an uninterrupted run.
func TestEmbedResume(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	texts := corpusLines(t, 1200)
	in := filepath.Join(dir, "in.txt")
	writeLines(t, in, texts)

	refJSONL := filepath.Join(dir, "ref.jsonl")
	runEmbedCmd(t, bin, "--model", model, "--input", in, "--output", refJSONL, "--threads", "1")
	ref := readJSONL(t, refJSONL)
	if len(ref) != len(texts) {
		t.Fatalf("reference run wrote %d records, want %d", len(ref), len(texts))
	}

	for _, tc := range []struct {
		output string
		sig    syscall.Signal
		code   int
	}{{"out.jsonl", syscall.SIGKILL, -1}, {"out.npy", syscall.SIGINT, 130}} {
		t.Run(tc.output, func(t *testing.T) {
			out := filepath.Join(dir, tc.output)
			// Small batches, one at a time, one thread: slow enough to stop midway.
			args := []string{"embed", "--model", model, "--input", in, "--output", out, "--batch-size", "8", "--in-flight", "1", "--threads", "1"}
			cmd := exec.Command(bin, args...)
			p := e2e.Start(t, cmd)
			rowsOf := func() int64 {
				fi, err := os.Stat(out)
				if err != nil {
					return 0
				}
				if strings.HasSuffix(out, ".npy") {
					return (fi.Size() - 128) / (64 * 4)
				}
				return fi.Size() / 1000 // about 1 KB per record of 64 floats
			}
			deadline := time.Now().Add(2 * time.Minute)
			for rowsOf() < 150 {
				select {
				case <-p.Done():
					t.Fatalf("the job ended before it could be interrupted: %v\n%s", p.Err(), p.Out)
				case <-time.After(20 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("no progress in 2 minutes\n%s", p.Out)
				}
			}
			if err := p.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := e2e.ExitCode(p.Err()); code != tc.code {
				t.Fatalf("exit code %d after %v, want %d\n%s", code, tc.sig, tc.code, p.Out)
			}
			if tc.sig == syscall.SIGINT && !strings.Contains(p.Out.String(), "interrupted; run the same command again to resume") {
				t.Errorf("no resume hint after SIGINT:\n%s", p.Out)
			}

			log := runEmbedCmd(t, bin, args[1:]...)
			if !strings.Contains(log, "resuming: the output already holds vectors") {
				t.Errorf("second run did not resume:\n%s", log)
			}
			var ids []string
			var vecs [][]float64
			if strings.HasSuffix(out, ".npy") {
				vecs = readNPYFile(t, out)
				b, _ := os.ReadFile(out + ".ids")
				ids = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			} else {
				for _, r := range readJSONL(t, out) {
					ids = append(ids, string(r.ID))
					vecs = append(vecs, r.Embedding)
				}
			}
			if len(ids) != len(texts) || len(vecs) != len(texts) {
				t.Fatalf("%d ids and %d vectors after resume, want %d each", len(ids), len(vecs), len(texts))
			}
			for i := range texts {
				if ids[i] != strconv.Itoa(i+1) {
					t.Fatalf("record %d has id %s, want %d (every id once, in order)", i, ids[i], i+1)
				}
				if c := e2e.Cosine(vecs[i], ref[i].Embedding); c < embedCosine {
					t.Fatalf("record %d: cosine %.7f with the uninterrupted run, want ≥ %v", i, c, embedCosine)
				}
			}
		})
	}
}

// TestEmbedFlagErrors: bad command lines are refused before any model is touched, with
// the flag to change.
func TestEmbedFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--output", "x.jsonl"}, nil, "--model is required"},
		{[]string{"--model", "m.gguf"}, nil, "--output is required"},
		{[]string{"--model", "m.gguf", "--output", "a", "--input", "a"}, nil, "--input and --output are the same file"},
		{[]string{"--model", "m.gguf", "--output", "o", "--batch-size", "0"}, nil, "--batch-size must be at least 1; got 0"},
		{[]string{"--model", "m.gguf", "--output", "o", "--input-type", "question"}, nil, "--input-type"},
		{[]string{"--model", "m.gguf", "--output", "o", "--input-format", "csv"}, nil, `--input-format "csv": use lines, jsonl or auto`},
		{[]string{"--output", "o"}, map[string]string{"EMBED_STACK_MODEL": "m.gguf", "EMBED_STACK_MAX_EPHEMERAL": "-1"}, "must not be negative"},
		{[]string{"--model", "m.gguf", "--output", "o", "--warm-max-tokens", "40000"}, nil, "--warm-max-tokens (40000) is larger than --max-input-tokens (32768)"},
		{[]string{"--model", "m.gguf", "--output", "o", "--input", "i", "--shard", "3/3"}, nil, `--shard: shard "3/3": want i/N with 0 ≤ i < N, such as 0/4`},
		{[]string{"--model", "m.gguf", "--output", "o", "--input", "i", "--shards", "4"}, nil, "--shards 4 needs this run's index: set --shard i/4, or JOB_COMPLETION_INDEX (a Kubernetes Indexed Job sets it)"},
		{[]string{"--model", "m.gguf", "--output", "o", "--input", "i"}, map[string]string{"EMBED_STACK_SHARDS": "4", "JOB_COMPLETION_INDEX": "4"}, `JOB_COMPLETION_INDEX="4" with --shards 4: shard "4/4"`},
		{[]string{"--model", "m.gguf", "--output", "o", "--shard", "0/2"}, nil, "a sharded run needs --input and --output files"},
		{[]string{"--model", "m.gguf", "--output", "o.parquet"}, nil, "a .parquet --output needs an --input file"},
		{[]string{"--model", "m.gguf", "--output", "o.npy", "--input", "i.jsonl", "--passthrough", "title"}, nil, "--passthrough needs JSONL input and a .parquet or chroma:// --output"},
		{[]string{"--model", "m.gguf", "--output", "o.jsonl", "--store-text"}, nil, "--store-text needs a chroma:// --output"},
		{[]string{"--model", "m.gguf", "--output", "chroma://localhost/x"}, nil, `--output chroma://localhost/x: Chroma refuses the collection name "x"`},
		{[]string{"--model", "m.gguf", "--output", "chroma://localhost/docs?space=l2"}, nil, `unknown parameter "space" (tenant or database)`},
		{[]string{"--model", "m.gguf", "--output", "chroma://localhost/docs", "--input", "i.txt", "--passthrough", "title"}, nil, "--passthrough needs JSONL input: its fields become each record's metadata"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseEmbedFlags(tt.args, new(bytes.Buffer), new(bytes.Buffer), func(k string) string { return tt.env[k] })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	f, err := parseEmbedFlags([]string{"--output", "o.npy", "--input", "docs.ndjson"}, new(bytes.Buffer), new(bytes.Buffer), func(k string) string {
		return map[string]string{"EMBED_STACK_MODEL": "Qwen/Qwen3-Embedding-0.6B-GGUF", "EMBED_STACK_THREADS": "3"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := f.reader.config(f.input); f.run.Model != "Qwen/Qwen3-Embedding-0.6B-GGUF" || f.run.Threads != 3 || r.Format.String() != "jsonl" {
		t.Errorf("model %q threads %d format %v; want the environment's values and jsonl by extension", f.run.Model, f.run.Threads, r.Format)
	}
	// An Indexed Job's pod: the count from the environment, the index from Kubernetes.
	f, err = parseEmbedFlags([]string{"--model", "m", "--output", "o.npy", "--input", "i.jsonl"}, new(bytes.Buffer), new(bytes.Buffer), func(k string) string {
		return map[string]string{"EMBED_STACK_SHARDS": "8", "JOB_COMPLETION_INDEX": "5"}[k]
	})
	if err != nil || f.shard.String() != "5/8" {
		t.Errorf("shard %v, err %v; want 5/8", f.shard, err)
	}
}

// TestEmbedRefusesAnotherJob: an output keeps what made its vectors (FILE.job.json:
// the model file's sha256, pooling, input type, prompt, dimensions, and its first
// text's digest); resuming it with other settings, or from another input of lines
// (whose ids, line numbers, match any output's), is refused with exit 1, naming
// the difference, and leaves it as it was; the same file under another name
// resumes.
func TestEmbedRefusesAnotherJob(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in, other := filepath.Join(dir, "in.txt"), filepath.Join(dir, "other.txt")
	writeLines(t, in, corpusLines(t, 20))
	writeLines(t, other, []string{"a text of another corpus", "and a second one"})
	out := filepath.Join(dir, "out.jsonl")
	runEmbedCmd(t, bin, "--model", model, "--input", in, "--output", out, "--threads", "1")
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	rec, err := os.ReadFile(out + ".job.json")
	var got map[string]any
	if err != nil || json.Unmarshal(rec, &got) != nil || got["model_sha256"] != hex.EncodeToString(sum[:]) || got["input_type"] != "document" ||
		got["pooling"] != "last" || got["dimensions"] != 64.0 {
		t.Fatalf("%s: %s (%v); want the model's sha256, document, last, 64", out+".job.json", rec, err)
	}
	before, _ := os.ReadFile(out)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--input", in, "--input-type", "query"}, `input_type document (this job: query), prompt "" (this job: "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:")`},
		{[]string{"--input", in, "--pooling", "mean"}, "pooling last (this job: mean)"},
		{[]string{"--input", other}, "the input's first item (line 1) is not the text the output's first row was made from"},
	} {
		args := append([]string{"embed", "--model", model, "--output", out, "--threads", "1"}, tc.args...)
		code, _, errOut := runCLI(t, bin, nil, args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("embed %s: exit %d\n%s\nwant exit 1 and %s", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
		if after, _ := os.ReadFile(out); !bytes.Equal(before, after) {
			t.Errorf("embed %s changed the output", strings.Join(tc.args, " "))
		}
	}
	// The same file by another path is the same model.
	moved := filepath.Join(dir, "moved.gguf")
	if err := os.WriteFile(moved, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if log := runEmbedCmd(t, bin, "--model", moved, "--input", in, "--output", out, "--threads", "1"); !strings.Contains(log, "resumed=20") {
		t.Errorf("resume with the model file copied elsewhere:\n%s", log)
	}
}

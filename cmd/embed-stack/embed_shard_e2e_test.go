package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/batch"
	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// writeJSONLCorpus writes n items {"id":"doc-i","text":…,"title":…} and returns the
// texts.
func writeJSONLCorpus(t *testing.T, path string, n int) []string {
	t.Helper()
	texts := corpusLines(t, n)
	var b strings.Builder
	for i, s := range texts {
		line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("doc-%03d", i), "text": s, "title": fmt.Sprintf("Title %d", i)})
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return texts
}

// TestEmbedShardsKilledAndMerged runs a 3-shard job as three processes of the real
// binary at once (one of them indexed by JOB_COMPLETION_INDEX, as a Kubernetes
// Indexed Job runs it), SIGKILLs two of them at random points mid-run, reruns those
// (as the Job's per-index retry does), and merges: the result is byte-identical to
// one process over the whole input (issue 18).
func TestEmbedShardsKilledAndMerged(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONLCorpus(t, in, 240)
	common := []string{"--model", model, "--input", in, "--threads", "1", "--batch-size", "8", "--in-flight", "1"}

	ref := filepath.Join(dir, "ref.jsonl")
	runEmbedCmd(t, bin, append(common, "--output", ref)...)

	const n = 3
	out := filepath.Join(dir, "out.jsonl")
	shardArgs := func(i int) (args []string, env []string) {
		args = append([]string{"embed"}, common...)
		args = append(args, "--output", out)
		if i == 1 {
			return append(args, "--shards", fmt.Sprint(n)), []string{"JOB_COMPLETION_INDEX=1"}
		}
		return append(args, "--shard", fmt.Sprintf("%d/%d", i, n)), nil
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 18))
	t.Logf("seed %d", seed)
	victims := map[int]int64{} // shard → rows to wait for before the kill
	for _, i := range rng.Perm(n)[:2] {
		victims[i] = 8 + rng.Int64N(60)
	}
	procs := make([]*e2e.Process, n)
	for i := range n {
		args, env := shardArgs(i)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		procs[i] = e2e.Start(t, cmd)
	}
	part := func(i int) string { return batch.ShardPath(out, batch.Shard{Index: i, Count: n}) }
	killed := 0
	for i, rows := range victims {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			b, _ := os.ReadFile(part(i))
			if int64(bytes.Count(b, []byte("\n"))) >= rows {
				break
			}
			select {
			case <-procs[i].Done():
			case <-time.After(10 * time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatalf("shard %d: no %d rows in 3 minutes\n%s", i, rows, procs[i].Out)
				}
				continue
			}
			break
		}
		if err := procs[i].Signal(syscall.SIGKILL); err == nil {
			if code := e2e.ExitCode(procs[i].Err()); code == -1 {
				killed++
			}
		}
		t.Logf("shard %d: SIGKILL after %d rows", i, rows)
	}
	for i, p := range procs {
		if _, victim := victims[i]; !victim {
			if err := p.Err(); err != nil {
				t.Fatalf("shard %d: %v\n%s", i, err, p.Out)
			}
		}
	}
	if killed == 0 {
		t.Log("both victims finished before their kill; the resume below had nothing to do")
	}
	for i := range victims {
		args, env := shardArgs(i)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("rerun of shard %d: %v\n%s", i, err, b)
		}
	}
	mergeOut, err := exec.Command(bin, "merge", "--input", in, "--output", out, "--shards", fmt.Sprint(n)).CombinedOutput()
	if err != nil {
		t.Fatalf("merge: %v\n%s", err, mergeOut)
	}
	want, _ := os.ReadFile(ref)
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, want) {
		t.Fatalf("merged output (%d bytes, %d lines) differs from the single run's (%d bytes, %d lines)", len(got), bytes.Count(got, []byte("\n")), len(want), bytes.Count(want, []byte("\n")))
	}
}

// TestEmbedParquetReadByPyarrow writes a Parquet output with a passthrough field and
// reads it with pyarrow: schema, ids, titles, and every float equal to the JSONL
// run's. The Python comes from EMBED_STACK_PYTHON (make test sets it to a virtual
// environment with pinned pyarrow).
func TestEmbedParquetReadByPyarrow(t *testing.T) {
	bin, model := e2e.Paths(t)
	python := testenv.Get("EMBED_STACK_PYTHON")
	if python == "" {
		e2e.Require(t, "EMBED_STACK_PYTHON is not set: the Parquet check needs a Python with pyarrow (make test sets it)")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONLCorpus(t, in, 30)
	ref := filepath.Join(dir, "ref.jsonl")
	common := []string{"--model", model, "--input", in, "--threads", "1", "--batch-size", "8"}
	runEmbedCmd(t, bin, append(common, "--output", ref)...)
	pq := filepath.Join(dir, "v.parquet")
	runEmbedCmd(t, bin, append(common, "--output", pq, "--passthrough", "title")...)
	if _, err := os.Stat(pq + ".npy"); err == nil {
		t.Error("the work file v.parquet.npy is left after the Parquet output was written")
	}
	const script = `
import json, sys
import pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
print(json.dumps({"schema": [f"{f.name}:{f.type}:{f.nullable}" for f in t.schema],
                  "rows": t.to_pylist()}))`
	out, err := exec.Command(python, "-c", script, pq).CombinedOutput()
	if err != nil {
		t.Fatalf("pyarrow: %v\n%s", err, out)
	}
	var got struct {
		Schema []string
		Rows   []struct {
			ID        string
			Embedding []float64
			Title     *string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "[embedding:list<element: float not null>:False id:string:False title:string:True]"; fmt.Sprint(got.Schema) != want {
		t.Errorf("schema %v, want %s", got.Schema, want)
	}
	recs := readJSONL(t, ref)
	if len(got.Rows) != len(recs) {
		t.Fatalf("%d rows in the Parquet file, %d in the JSONL run", len(got.Rows), len(recs))
	}
	for i, r := range got.Rows {
		if `"`+r.ID+`"` != string(recs[i].ID) || r.Title == nil || *r.Title != fmt.Sprintf("Title %d", i) || len(r.Embedding) != len(recs[i].Embedding) {
			t.Fatalf("row %d: id %s title %v %d dims; want %s, Title %d, %d dims", i, r.ID, r.Title, len(r.Embedding), recs[i].ID, i, len(recs[i].Embedding))
		}
		for j, x := range r.Embedding {
			if math.Float32bits(float32(x)) != math.Float32bits(float32(recs[i].Embedding[j])) {
				t.Fatalf("row %d [%d]: %v in Parquet, %v in JSONL", i, j, x, recs[i].Embedding[j])
			}
		}
	}
}

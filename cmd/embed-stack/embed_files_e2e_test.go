package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// The batch job treats every path as precious (issue 28): these run the real binary
// on the files that used to be destroyed, read without bound or hung on.

// guardedRun is one run of the binary under a memory and time guard.
type guardedRun struct {
	code    int    // exit status; -1 when the guard killed it
	output  string // stderr (and stdout when not captured apart)
	stdout  string // stdout when captured apart
	killed  string // why the guard killed it, "" when it exited on its own
	peakRSS int64  // the process tree's largest resident size seen, bytes
	// peakMain is the binary's own largest resident size seen (its workers apart).
	peakMain int64
}

// runGuarded runs bin with args in dir, killing its process group when the tree's
// resident memory passes maxRSS or it runs past limit: a run that reads a device
// without bound must fail the test, not the machine. With splitStdout, standard
// output goes through a pipe of its own (as `| cat` gives it) and is returned apart.
func runGuarded(t *testing.T, dir string, maxRSS int64, limit time.Duration, splitStdout bool, bin string, args ...string) guardedRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, stdout bytes.Buffer
	cmd.Stderr = &out
	cmd.Stdout = &out
	if splitStdout {
		cmd.Stdout = &stdout
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var r guardedRun
	deadline := time.After(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			r.code, r.output, r.stdout = e2e.ExitCode(err), out.String(), stdout.String()
			return r
		case <-deadline:
			r.killed = fmt.Sprintf("still running after %s", limit)
		case <-tick.C:
			rss, main := treeRSS(cmd.Process.Pid)
			r.peakMain = max(r.peakMain, main)
			if rss > r.peakRSS {
				r.peakRSS = rss
				if rss > maxRSS {
					r.killed = fmt.Sprintf("resident memory %d MiB past the bound of %d MiB", rss>>20, maxRSS>>20)
				}
			}
		}
		if r.killed != "" {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			r.code, r.output = -1, out.String()
			return r
		}
	}
}

// lastError is the error of a JSON log's "embed-stack embed failed" (or merge) line.
func lastError(t *testing.T, log string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(log), "\n")
	var rec struct{ Msg, Error string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil || !strings.HasSuffix(rec.Msg, " failed") {
		t.Fatalf("last log line %q (%v), want the failure", lines[len(lines)-1], err)
	}
	return rec.Error
}

// TestEmbedNeverWipesItsInput: the input named another way as --output (./, a
// symbolic link, a hard link), with --overwrite, is refused before anything is
// opened for writing (issue 28: the input was truncated to 0 bytes, exit 0).
func TestEmbedNeverWipesItsInput(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	corpus := `{"id":1,"text":"alpha"}` + "\n" + `{"id":2,"text":"beta"}` + "\n"
	in := filepath.Join(dir, "s.jsonl")
	os.WriteFile(in, []byte(corpus), 0o644)
	os.Symlink("s.jsonl", filepath.Join(dir, "link.jsonl"))
	os.Link(in, filepath.Join(dir, "hard.jsonl"))
	for _, out := range []string{"./s.jsonl", "link.jsonl", "hard.jsonl", in} {
		t.Run(out, func(t *testing.T) {
			r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, "embed", "--log-format", "json", "--model", model,
				"--input", "s.jsonl", "--output", out, "--overwrite", "--threads", "1")
			if r.code != 1 {
				t.Fatalf("exit status %d (%s), want 1\n%s", r.code, r.killed, r.output)
			}
			want := "the input (s.jsonl) and the output (" + out + ") are the same file: the run would overwrite its own input; choose another --output"
			if got := lastError(t, r.output); got != want {
				t.Errorf("error\n%s\nwant\n%s", got, want)
			}
			if b, _ := os.ReadFile(in); string(b) != corpus {
				t.Fatalf("the input became %q", b)
			}
		})
	}
}

// TestEmbedRefusesForeignOutputs: an existing output that is not this job's is left
// as it was and the run fails, read no further than a record's length: a one-line
// file without a newline (issue 28: replaced by the vectors, exit 0), and a 300 MB
// file without a newline (issue 28: 1 GB of memory).
func TestEmbedRefusesForeignOutputs(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("alpha\nbeta\n"), 0o644)

	t.Run("one line without a newline", func(t *testing.T) {
		notes := filepath.Join(dir, "notes.jsonl")
		os.WriteFile(notes, []byte(`{"important":"data"}`), 0o644)
		r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, "embed", "--log-format", "json", "--model", model, "--input", in, "--output", notes, "--threads", "1")
		if r.code != 1 {
			t.Fatalf("exit status %d (%s), want 1\n%s", r.code, r.killed, r.output)
		}
		want := `resume ` + notes + `: line 1 (the last, without a newline) begins "{\"important\":\"data\"}", which no record of this job is: it is not an output of this job; pass --overwrite to start it over, or choose another --output`
		if got := lastError(t, r.output); got != want {
			t.Errorf("error\n%s\nwant\n%s", got, want)
		}
		if b, _ := os.ReadFile(notes); string(b) != `{"important":"data"}` {
			t.Fatalf("the file became %q", b)
		}
	})

	t.Run("300 MB without a newline", func(t *testing.T) {
		// 300 MB that start as a record, with no newline (sparse: no disk is used).
		huge := filepath.Join(dir, "huge.jsonl")
		f, _ := os.Create(huge)
		f.WriteString(`{"id":"`)
		f.Truncate(300 << 20)
		f.Close()
		r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, "embed", "--log-format", "json", "--model", model, "--input", in, "--output", huge, "--threads", "1")
		if r.code != 1 {
			t.Fatalf("exit status %d (%s), want 1\n%s", r.code, r.killed, r.output)
		}
		if got := lastError(t, r.output); !strings.HasPrefix(got, "resume "+huge+`: line 1 begins "{\"id\":\"\x00`) {
			t.Errorf("error %q", got)
		}
		if fi, _ := os.Stat(huge); fi.Size() != 300<<20 {
			t.Errorf("the file is %d bytes now", fi.Size())
		}
		// The job's process holds at most a record's bytes of it (the runtime and the
		// engine's tokenizer apart): well under the 1 GB the whole file took.
		if r.peakMain > 128<<20 {
			t.Errorf("peak RSS of embed %d MiB, want under 128 MiB", r.peakMain>>20)
		}
		t.Logf("300 MB file refused; peak RSS of embed %d MiB, with its warm worker %d MiB", r.peakMain>>20, r.peakRSS>>20)
	})
}

// TestEmbedToDevices: an output that is not a regular file is written as a stream,
// never read back: /dev/zero takes the vectors (issue 28: 667 MB read in 1.2 s, then
// without bound), /dev/full fails with the write's error (issue 28: the OOM killer
// at 23 GB), and /dev/stdout piped to a reader gets the same bytes as a file
// (issue 28: it hung reading its own pipe).
func TestEmbedToDevices(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	writeLines(t, in, corpusLines(t, 12))
	common := []string{"embed", "--log-format", "json", "--model", model, "--input", in, "--threads", "1"}

	ref := filepath.Join(dir, "ref.jsonl")
	runEmbedCmd(t, bin, "--model", model, "--input", in, "--threads", "1", "--output", ref)
	want, _ := os.ReadFile(ref)

	t.Run("/dev/zero", func(t *testing.T) {
		r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, append(common, "--output", "/dev/zero")...)
		if r.code != 0 || !strings.Contains(r.output, `"msg":"embedding done","embedded":12,`) {
			t.Fatalf("exit status %d (%s), want 0 with 12 embedded\n%s", r.code, r.killed, r.output)
		}
	})
	t.Run("/dev/full", func(t *testing.T) {
		r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, append(common, "--output", "/dev/full")...)
		if r.code != 1 {
			t.Fatalf("exit status %d (%s), want 1\n%s", r.code, r.killed, r.output)
		}
		if got := lastError(t, r.output); got != "write output: write /dev/full: no space left on device" {
			t.Errorf("error %q", got)
		}
	})
	t.Run("/dev/stdout piped", func(t *testing.T) {
		r := runGuarded(t, dir, 512<<20, time.Minute, true, bin, append(common, "--output", "/dev/stdout")...)
		if r.code != 0 {
			t.Fatalf("exit status %d (%s), want 0\n%s", r.code, r.killed, r.output)
		}
		if r.stdout != string(want) {
			t.Errorf("/dev/stdout gave %d bytes, not the %d bytes of a file output", len(r.stdout), len(want))
		}
	})
}

// TestMergeNeverReplacesItsInput: merge --input X --output X is refused, X left as it
// was (issue 28: the corpus was replaced by its vectors, exit 0).
func TestMergeNeverReplacesItsInput(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "docs.jsonl")
	writeJSONLCorpus(t, in, 8)
	corpus, _ := os.ReadFile(in)
	for i := range 2 {
		runEmbedCmd(t, bin, "--model", model, "--input", in, "--output", filepath.Join(dir, "v.jsonl"), "--shard", fmt.Sprintf("%d/2", i), "--threads", "1")
		// The parts as a job whose --output was the input would have named them.
		os.Rename(filepath.Join(dir, fmt.Sprintf("v-%05d-of-00002.jsonl", i)), filepath.Join(dir, fmt.Sprintf("docs-%05d-of-00002.jsonl", i)))
	}
	r := runGuarded(t, dir, 512<<20, time.Minute, false, bin, "merge", "--log-format", "json", "--input", in, "--output", "./docs.jsonl", "--shards", "2")
	if r.code != 1 {
		t.Fatalf("exit status %d (%s), want 1\n%s", r.code, r.killed, r.output)
	}
	if got, want := lastError(t, r.output), "the input (--input) and the output (./docs.jsonl) are the same file: the run would overwrite its own input; choose another --output"; got != want {
		t.Errorf("error\n%s\nwant\n%s", got, want)
	}
	if b, _ := os.ReadFile(in); !bytes.Equal(b, corpus) {
		t.Fatal("the input changed")
	}
}

// TestEmbedIDRules: the id rules hold through the binary: an id repeated across two
// shards' slices is reported by merge with advice that works (issue 28: never
// reported, and the advice reproduced the error); the ids "7" and 7 are one id for a
// .parquet output (issue 28: two rows with the id 7); a JSONL line with its text
// twice is refused as the HTTP API refuses such a body (it took the last).
func TestEmbedIDRules(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()

	t.Run("repeated across shards", func(t *testing.T) {
		in := filepath.Join(dir, "in.jsonl")
		writeJSONLCorpus(t, in, 10)
		f, _ := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(`{"id":"doc-001","text":"the same id again"}` + "\n")
		f.Close()
		out := filepath.Join(dir, "v.npy")
		shard := func(i int, extra ...string) {
			runEmbedCmd(t, bin, append([]string{"--model", model, "--input", in, "--output", out, "--shard", fmt.Sprintf("%d/2", i), "--threads", "1"}, extra...)...)
		}
		shard(0)
		shard(1)
		r := runGuarded(t, dir, 512<<20, time.Minute, false, bin, "merge", "--log-format", "json", "--input", in, "--output", out, "--shards", "2")
		if r.code != 1 {
			t.Fatalf("merge: exit status %d, want 1\n%s", r.code, r.output)
		}
		want := `input line 11 repeats the id "doc-001" of line 2: every id must be unique, since the output holds each id once; the shards embedded both lines, since each reads only its slice of the input. Give every item its own id, then run every shard again with --overwrite (the slices move when the input changes)`
		if got := lastError(t, r.output); got != want {
			t.Errorf("merge error\n%s\nwant\n%s", got, want)
		}
		// The advice works.
		b, _ := os.ReadFile(in)
		os.WriteFile(in, bytes.Replace(b, []byte(`{"id":"doc-001","text":"the same`), []byte(`{"id":"doc-011","text":"the same`), 1), 0o644)
		shard(0, "--overwrite")
		shard(1, "--overwrite")
		r = runGuarded(t, dir, 512<<20, time.Minute, false, bin, "merge", "--log-format", "json", "--input", in, "--output", out, "--shards", "2")
		if r.code != 0 || !strings.Contains(r.output, `"rows":11,`) {
			t.Fatalf("merge after the fix: exit status %d\n%s", r.code, r.output)
		}
	})

	t.Run("7 and \"7\" in a .parquet", func(t *testing.T) {
		pin := filepath.Join(dir, "ids.jsonl")
		os.WriteFile(pin, []byte(`{"id":"7","text":"alpha"}`+"\n"+`{"id":7,"text":"beta"}`+"\n"), 0o644)
		r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, "embed", "--log-format", "json", "--model", model, "--input", pin, "--output", filepath.Join(dir, "v.parquet"), "--threads", "1")
		if r.code != 1 {
			t.Fatalf("parquet ids: exit status %d, want 1\n%s", r.code, r.output)
		}
		if got, want := lastError(t, r.output), `input line 2 repeats the id 7 of line 1 (as text, which a .parquet or .npy output holds: "7" and 7 are one id there): every id must be unique, since the output holds each id once (fix the input, or pass --skip-invalid to skip such lines)`; got != want {
			t.Errorf("parquet ids error\n%s\nwant\n%s", got, want)
		}
	})

	t.Run("text twice", func(t *testing.T) {
		kin := filepath.Join(dir, "keys.jsonl")
		os.WriteFile(kin, []byte(`{"id":1,"text":"alpha","text":"beta"}`+"\n"), 0o644)
		r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, "embed", "--log-format", "json", "--model", model, "--input", kin, "--output", filepath.Join(dir, "k.jsonl"), "--threads", "1")
		if r.code != 1 {
			t.Fatalf("repeated key: exit status %d, want 1\n%s", r.code, r.output)
		}
		if got, want := lastError(t, r.output), `input line 1 holds the key "text" more than once; give each key once (the HTTP API refuses such bodies too: JSON readers differ on which one counts) (fix the input, or pass --skip-invalid to skip such lines)`; got != want {
			t.Errorf("repeated key error\n%s\nwant\n%s", got, want)
		}
	})
}

// TestEmbedParquetRerunDoesNothing: a finished .parquet job run again checks the file
// against the input and stops, starting no worker and leaving the file as it was, as
// a finished .npy or JSONL job does (issue 28: it embedded the whole corpus again).
func TestEmbedParquetRerunDoesNothing(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONLCorpus(t, in, 10)
	out := filepath.Join(dir, "v.parquet")
	args := []string{"embed", "--log-format", "json", "--model", model, "--input", in, "--output", out, "--threads", "1"}
	if r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, args...); r.code != 0 {
		t.Fatalf("first run: exit status %d\n%s", r.code, r.output)
	}
	first, _ := os.ReadFile(out)
	fi1, _ := os.Stat(out)
	r := runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, args...)
	if r.code != 0 {
		t.Fatalf("rerun: exit status %d\n%s", r.code, r.output)
	}
	if !strings.Contains(r.output, `"msg":"the output already holds every item; nothing to do","output":"`+out+`","rows":10,"missing":0}`) {
		t.Errorf("rerun log:\n%s", r.output)
	}
	if strings.Contains(r.output, "warm worker ready") || strings.Contains(r.output, "embedding done") {
		t.Errorf("the rerun embedded:\n%s", r.output)
	}
	second, _ := os.ReadFile(out)
	fi2, _ := os.Stat(out)
	if !bytes.Equal(first, second) || !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Error("the rerun rewrote the output")
	}
	// An input that gained a line is not done: a Parquet file cannot be resumed.
	f, _ := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"id":"new","text":"one more"}` + "\n")
	f.Close()
	r = runGuarded(t, dir, 512<<20, 2*time.Minute, false, bin, args...)
	if r.code != 1 {
		t.Fatalf("grown input: exit status %d\n%s", r.code, r.output)
	}
	if got := lastError(t, r.output); !strings.Contains(got, `1 input items have no row in it, the first on line 11 (id "new") (items added to the input since`) || !strings.HasSuffix(got, "pass --overwrite to embed the input again, or choose another --output") {
		t.Errorf("grown input: error %q", got)
	}
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// TestEmbedProgressByItems: the progress lines count items against the input's
// items (where it counted bytes: 16 of 200 items showed 9%), every line's percent is done/total,
// and once a line has an ETA every later one has (it blanked between 88% and 97%);
// the .npy output's ids are plain, one a line, in a file NumPy loads (issue 27).
func TestEmbedProgressByItems(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	// 2000 items: the run lasts more than the rate's first window (250 ms) even on a
	// fast host, so the ETA appears (a fifth of them took 0.2 s once the tiny model's
	// BF16 products ran in embed-stack's kernels, and no line had one).
	const items = 2000
	texts := writeJSONLCorpus(t, in, items)
	// A blank line is no item: the total stays the items'.
	b, _ := os.ReadFile(in)
	os.WriteFile(in, append([]byte("\n"), b...), 0o644)
	out := filepath.Join(dir, "v.npy")
	log := runEmbedCmd(t, bin, "--model", model, "--input", in, "--output", out, "--threads", "1", "--batch-size", "16", "--progress-interval", "1ms")

	re := regexp.MustCompile(`msg="embed progress" done=(\d+) total=(\d+) percent=([0-9.]+) embedded=(\d+)( items_per_s=[0-9.]+ eta=\d+[hms0-9]*)?\n`)
	lines := re.FindAllStringSubmatch(log, -1)
	if n := strings.Count(log, `msg="embed progress"`); n != len(lines) || n < 3 {
		t.Fatalf("%d progress lines, %d of the expected shape, want at least 3:\n%s", n, len(lines), log)
	}
	hadETA := false
	for _, l := range lines {
		done, _ := strconv.Atoi(l[1])
		pct, _ := strconv.ParseFloat(l[3], 64)
		if l[2] != strconv.Itoa(items) || done%16 != 0 || l[4] != l[1] {
			t.Errorf("progress line %q: want total=%d, done a multiple of the batch, embedded=done", l[0], items)
		}
		if want := round1(float64(done) * 100 / items); pct != want {
			t.Errorf("progress line %q: percent %v, want %v (items done of the input's)", l[0], pct, want)
		}
		if hadETA && l[5] == "" {
			t.Errorf("progress line %q has no ETA after one had", l[0])
		}
		hadETA = hadETA || l[5] != ""
	}
	if !hadETA {
		t.Errorf("no progress line has an ETA:\n%s", log)
	}
	if want := fmt.Sprintf(`msg="embedding done" embedded=%d resumed=0 invalid=0 blank_lines=1 dropped=0 seconds=`, items); !strings.Contains(log, want) || !strings.Contains(log, "output="+out+"\n") {
		t.Errorf("log lacks the summary naming output=%s:\n%s", out, log)
	}
	ids, _ := os.ReadFile(out + ".ids")
	var want strings.Builder
	for i := range texts {
		fmt.Fprintf(&want, "doc-%03d\n", i)
	}
	if string(ids) != want.String() {
		t.Errorf("ids file begins %q, want plain ids one a line", ids[:min(len(ids), 40)])
	}
	python := testenv.Get("EMBED_STACK_PYTHON")
	if python == "" {
		e2e.Require(t, "EMBED_STACK_PYTHON is not set: the .npy check needs a Python with NumPy (make test sets it)")
		return
	}
	got, err := exec.Command(python, "-c", `import sys, numpy
a = numpy.load(sys.argv[1])
ids = open(sys.argv[1] + ".ids", encoding="utf-8").read().split("\n")[:-1]
print(a.shape, a.dtype, len(ids), ids[0], ids[-1])`, out).CombinedOutput()
	if err != nil || string(got) != fmt.Sprintf("(%d, 64) float32 %d doc-000 doc-%03d\n", items, items, items-1) {
		t.Errorf("numpy: %v\n%s", err, got)
	}
}

// TestEmbedLogsNameTheUsersFiles: a .parquet run's log names the output as given,
// never its work file, and the Parquet file's writing is no "merge" of "parts=1";
// merge names the shards (issue 27).
func TestEmbedLogsNameTheUsersFiles(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONLCorpus(t, in, 20)
	common := []string{"--model", model, "--input", in, "--threads", "1", "--batch-size", "8"}
	pq := filepath.Join(dir, "v.parquet")
	log := runEmbedCmd(t, bin, append(common, "--output", pq)...)
	for _, want := range []string{
		`msg="warm worker ready" duration=`,
		` dim=64 output=` + pq + "\n",
		`msg="embedding done" embedded=20 resumed=0 invalid=0 blank_lines=0 dropped=0 seconds=`,
		`msg="wrote the output" output=` + pq + ` rows=20 missing=0 invalid_lines=0 seconds=`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, ".parquet.npy") || strings.Contains(log, "parts=") || strings.Contains(log, "msg=merged") {
		t.Errorf("log names the work file or parts:\n%s", log)
	}

	out := filepath.Join(dir, "s.npy")
	for i := range 2 {
		log := runEmbedCmd(t, bin, append(common, "--output", out, "--shard", fmt.Sprintf("%d/2", i))...)
		if want := fmt.Sprintf(" output=%s shard=%d/2 part=%s\n", out, i, filepath.Join(dir, fmt.Sprintf("s-%05d-of-00002.npy", i))); !strings.Contains(log, want) {
			t.Errorf("shard %d: log lacks %q:\n%s", i, want, log)
		}
	}
	mlog, err := exec.Command(bin, "merge", "--input", in, "--output", out, "--shards", "2").CombinedOutput()
	if want := `msg="merged the shards' parts" output=` + out + ` rows=20 shards=2 missing=0 invalid_lines=0 seconds=`; err != nil || !strings.Contains(string(mlog), want) {
		t.Errorf("merge: %v; log lacks %q:\n%s", err, want, mlog)
	}
	if ids, _ := os.ReadFile(out + ".ids"); !strings.HasPrefix(string(ids), "doc-000\ndoc-001\n") {
		t.Errorf("merged ids begin %q, want plain ids", ids[:min(len(ids), 20)])
	}
}

// TestEmbedResumesOldIDsFile: a .npy output written before plain ids (its header
// ending "), }" and its ids JSON, one a line), interrupted, resumes with the new
// binary: its rows are kept, the rest appended in the file's own form, and the array
// is the uninterrupted run's. An id with a line break, which plain ids cannot hold,
// is refused by line for a new .npy output.
func TestEmbedResumesOldIDsFile(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONLCorpus(t, in, 30)
	args := func(out string) []string {
		return []string{"--model", model, "--input", in, "--output", out, "--threads", "1", "--batch-size", "8"}
	}
	ref := filepath.Join(dir, "ref.npy")
	runEmbedCmd(t, bin, args(ref)...)
	arr, _ := os.ReadFile(ref)
	const header, row = 128, 64 * 4
	// The old writer's header, built here by hand: NumPy's spelling, "), }".
	old := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", 30, 64)
	old = "\x93NUMPY\x01\x00" + string([]byte{118, 0}) + old + strings.Repeat(" ", header-10-len(old)-1) + "\n"
	out := filepath.Join(dir, "out.npy")
	os.WriteFile(out, append([]byte(old), arr[header:header+12*row]...), 0o644)
	var oldIDs strings.Builder
	for i := range 12 {
		fmt.Fprintf(&oldIDs, "\"doc-%03d\"\n", i)
	}
	os.WriteFile(out+".ids", []byte(oldIDs.String()), 0o644)
	log := runEmbedCmd(t, bin, args(out)...)
	if want := `msg="resuming: the output already holds vectors; their items are skipped" output=` + out + ` records=12`; !strings.Contains(log, want) {
		t.Errorf("log lacks %q:\n%s", want, log)
	}
	if !strings.Contains(log, `msg="embedding done" embedded=18 resumed=12 `) {
		t.Errorf("the resume did not embed exactly the 18 missing items:\n%s", log)
	}
	got, _ := os.ReadFile(out)
	if string(got[:header]) != old || string(got[header:]) != string(arr[header:]) {
		t.Errorf("resumed array: header %q, %d data bytes; want the old header and the uninterrupted run's %d bytes", got[:header], len(got)-header, len(arr)-header)
	}
	ids, _ := os.ReadFile(out + ".ids")
	var want strings.Builder
	for i := range 30 {
		fmt.Fprintf(&want, "\"doc-%03d\"\n", i)
	}
	if string(ids) != want.String() {
		t.Errorf("resumed ids %q…, want the old form throughout", ids[:min(len(ids), 60)])
	}

	nl := filepath.Join(dir, "nl.jsonl")
	os.WriteFile(nl, []byte(`{"id":"a","text":"one"}`+"\n"+`{"id":"b\nc","text":"two"}`+"\n"), 0o644)
	if got, want := embedFails(t, bin, "--model", model, "--input", nl, "--output", filepath.Join(dir, "nl.npy"), "--threads", "1"),
		`input line 2 has the id "b\nc", which holds a line break: a .npy output's ids file holds one id a line, as text; choose a .jsonl or .parquet --output for such ids (fix the input, or pass --skip-invalid to skip such lines)`; got != want {
		t.Errorf("error %q\nwant  %q", got, want)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/e2e"
	"github.com/embed-stack/embed-stack/internal/testenv"
)

// The batch job into a real Chroma server (`chroma run` of the pinned chromadb, from
// the virtual environment EMBED_STACK_CHROMA_VENV names; make test-go sets it to
// .cache/venv-integrations). Every collection is read back with chromadb's own
// Python client, not with the job's Go code.

// chromaServer is a running `chroma run`.
type chromaServer struct {
	venv, dir, addr string
	proc            *e2e.Process
}

func chromaVenv(t *testing.T) string {
	t.Helper()
	venv := testenv.Get("EMBED_STACK_CHROMA_VENV")
	if venv == "" {
		e2e.Require(t, "EMBED_STACK_CHROMA_VENV is not set: the Chroma tests need a virtual environment with chromadb (make test-go sets it)")
	}
	return venv
}

// startChroma starts a Chroma server keeping its data in dir, on addr ("" for a
// free port), and waits until it answers.
func startChroma(t *testing.T, venv, dir, addr string) *chromaServer {
	t.Helper()
	if addr == "" {
		addr = e2e.FreeAddr(t)
	}
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(filepath.Join(venv, "bin", "chroma"), "run", "--path", dir, "--host", host, "--port", port)
	cmd.Env = append(os.Environ(), "ANONYMIZED_TELEMETRY=False")
	s := &chromaServer{venv: venv, dir: dir, addr: addr, proc: e2e.Start(t, cmd)}
	// Under load the server takes a while: its Python wrapper imports first.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/api/v2/heartbeat")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.proc.Done():
			t.Fatalf("chroma run exited: %v\n%s", s.proc.Err(), s.proc.Out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("chroma run: no heartbeat at %s in 3 minutes\n%s", addr, s.proc.Out)
		}
	}
}

func (s *chromaServer) url(collection string) string { return "chroma://" + s.addr + "/" + collection }

// count is the collection's record count, -1 while it does not exist.
func (s *chromaServer) count(t *testing.T, collection string) int {
	t.Helper()
	base := "http://" + s.addr + "/api/v2/tenants/default_tenant/databases/default_database/collections/"
	var c struct{ ID string }
	if !getJSON(t, base+collection, &c) {
		return -1
	}
	var n int
	if !getJSON(t, base+c.ID+"/count", &n) {
		t.Fatalf("count of %s failed", collection)
	}
	return n
}

func getJSON(t *testing.T, url string, out any) bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return false
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
	return true
}

// chromaCollection is a collection as chromadb's client reads it back, with, for
// each record, the id its own vector retrieves first (n_results=1).
type chromaCollection struct {
	Count      int
	IDs        []string
	Embeddings [][]float64
	Metadatas  []map[string]any
	Documents  []*string
	First      []string
}

const chromaReadScript = `
import json, sys, chromadb
host, port = sys.argv[1].rsplit(":", 1)
col = chromadb.HttpClient(host=host, port=int(port)).get_collection(sys.argv[2])
got = col.get(include=["embeddings", "metadatas", "documents"])
first = []
for i in range(0, len(got["ids"]), 100):
    q = col.query(query_embeddings=got["embeddings"][i:i + 100], n_results=1, include=[])
    first += [r[0] for r in q["ids"]]
print(json.dumps({"count": col.count(), "ids": got["ids"],
                  "embeddings": [[float(x) for x in e] for e in got["embeddings"]],
                  "metadatas": got["metadatas"], "documents": got["documents"], "first": first}))
`

func (s *chromaServer) read(t *testing.T, collection string) chromaCollection {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.venv, "bin", "python"), "-c", chromaReadScript, s.addr, collection)
	cmd.Env = append(os.Environ(), "ANONYMIZED_TELEMETRY=False")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("read %s back with chromadb: %v\n%s", collection, err, stderr)
	}
	var c chromaCollection
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("%v: %.300s", err, out)
	}
	return c
}

// checkCollection asserts that c holds exactly the records of the reference JSONL
// run ref, each once, with bit-identical vectors, and that every record's own
// vector retrieves it first. It returns the records by id.
func checkCollection(t *testing.T, c chromaCollection, ref []jsonlRecord) map[string]int {
	t.Helper()
	if c.Count != len(ref) || len(c.IDs) != len(ref) {
		t.Fatalf("the collection holds %d records (%d read), want %d", c.Count, len(c.IDs), len(ref))
	}
	at := make(map[string]int, len(c.IDs))
	for i, id := range c.IDs {
		if _, dup := at[id]; dup {
			t.Fatalf("id %q twice in the collection", id)
		}
		at[id] = i
	}
	for _, r := range ref {
		var id string
		if err := json.Unmarshal(r.ID, &id); err != nil {
			t.Fatal(err)
		}
		i, ok := at[id]
		if !ok {
			t.Fatalf("id %q is not in the collection", id)
		}
		if len(c.Embeddings[i]) != len(r.Embedding) {
			t.Fatalf("%s: %d dimensions, want %d", id, len(c.Embeddings[i]), len(r.Embedding))
		}
		for j, x := range c.Embeddings[i] {
			if math.Float32bits(float32(x)) != math.Float32bits(float32(r.Embedding[j])) {
				t.Fatalf("%s [%d]: %v in Chroma, %v from the JSONL run", id, j, x, r.Embedding[j])
			}
		}
		if c.First[i] != id {
			t.Fatalf("querying %s's own vector retrieves %s first", id, c.First[i])
		}
	}
	return at
}

// writeChromaCorpus writes n items with a title, a number and tags, and returns the
// texts.
func writeChromaCorpus(t *testing.T, path string, n int) []string {
	t.Helper()
	texts := corpusLines(t, n)
	var b strings.Builder
	for i, s := range texts {
		line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("doc-%03d", i), "text": s, "title": fmt.Sprintf("Title %d", i),
			"n": i, "tags": []string{"opticks", fmt.Sprint("part-", i%3)}, "extra": map[string]int{"k": i}})
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return texts
}

// TestEmbedChromaRoundTrip: the job upserts into a collection it creates; chromadb
// reads back every id once, the JSONL run's vectors bit for bit, the texts as
// documents and the passthrough fields as metadata (a number as a number, a list
// of strings as a list, an object as its JSON text), and every record's own vector
// retrieves it first. Run again, the job finds everything there and embeds nothing.
func TestEmbedChromaRoundTrip(t *testing.T) {
	bin, model := e2e.Paths(t)
	venv := chromaVenv(t)
	dir := t.TempDir()
	chroma := startChroma(t, venv, filepath.Join(dir, "chroma"), "")
	in := filepath.Join(dir, "in.jsonl")
	const n = 150
	texts := writeChromaCorpus(t, in, n)
	common := []string{"--model", model, "--input", in, "--threads", "1", "--batch-size", "16"}
	ref := filepath.Join(dir, "ref.jsonl")
	runEmbedCmd(t, bin, append(common, "--output", ref)...)

	args := append(common, "--output", chroma.url("opticks"), "--store-text", "--passthrough", "title,n,tags,extra")
	out := runEmbedCmd(t, bin, args...)
	if !strings.Contains(out, "created=true records=0 space=ip base64_vectors=true") || !strings.Contains(out, fmt.Sprintf("embedded=%d resumed=0", n)) {
		t.Fatalf("first run's log:\n%s", out)
	}
	c := chroma.read(t, "opticks")
	at := checkCollection(t, c, readJSONL(t, ref))
	for i, text := range texts {
		id := fmt.Sprintf("doc-%03d", i)
		k := at[id]
		if d := c.Documents[k]; d == nil || *d != text {
			t.Fatalf("%s: document %v, want %q", id, d, text)
		}
		want := map[string]any{"title": fmt.Sprintf("Title %d", i), "n": float64(i),
			"tags": []any{"opticks", fmt.Sprint("part-", i%3)}, "extra": fmt.Sprintf(`{"k":%d}`, i)}
		if got := c.Metadatas[k]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: metadata %v, want %v", id, got, want)
		}
	}

	out = runEmbedCmd(t, bin, args...)
	if !strings.Contains(out, fmt.Sprintf("created=false records=%d", n)) || !strings.Contains(out, fmt.Sprintf("embedded=0 resumed=%d", n)) {
		t.Fatalf("second run's log:\n%s", out)
	}
	if got := chroma.count(t, "opticks"); got != n {
		t.Fatalf("after the second run the collection holds %d records", got)
	}

	// The collection keeps the job's record: another pooling is refused before
	// anything is written.
	code, _, errOut := runCLI(t, bin, nil, append(append([]string{"embed"}, args...), "--pooling", "mean")...)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("holds %d records of another job: pooling last (this job: mean)", n)) {
		t.Errorf("a run with another pooling: exit %d\n%s", code, errOut)
	}
	if got := chroma.count(t, "opticks"); got != n {
		t.Fatalf("after the refused run the collection holds %d records", got)
	}
}

// TestEmbedChromaShardsKilled: three shards write one collection at once; two are
// SIGKILLed mid-run and run again with the same command. The collection then holds
// every id exactly once with the single JSONL run's vectors, and the resumed runs
// embedded only what was missing.
func TestEmbedChromaShardsKilled(t *testing.T) {
	bin, model := e2e.Paths(t)
	venv := chromaVenv(t)
	dir := t.TempDir()
	chroma := startChroma(t, venv, filepath.Join(dir, "chroma"), "")
	in := filepath.Join(dir, "in.jsonl")
	const n, shards = 240, 3
	writeJSONLCorpus(t, in, n)
	common := []string{"--model", model, "--input", in, "--threads", "1", "--batch-size", "8", "--in-flight", "1"}
	ref := filepath.Join(dir, "ref.jsonl")
	runEmbedCmd(t, bin, append(common, "--output", ref)...)

	args := func(i int) []string {
		return append([]string{"embed"}, append(common, "--output", chroma.url("shards"), "--shard", fmt.Sprintf("%d/%d", i, shards))...)
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 26))
	t.Logf("seed %d", seed)
	procs := make([]*e2e.Process, shards)
	for i := range shards {
		procs[i] = e2e.Start(t, exec.Command(bin, args(i)...))
	}
	// Kill two shards once the collection holds enough records that each has
	// probably written some; where a victim finished first, its rerun has nothing
	// to do, which the test also accepts.
	victims := rng.Perm(shards)[:2]
	at := 16 + rng.IntN(n/2)
	deadline := time.Now().Add(5 * time.Minute)
	for chroma.count(t, "shards") < at {
		if time.Now().After(deadline) {
			t.Fatalf("no %d records in 5 minutes", at)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, i := range victims {
		_ = procs[i].Signal(syscall.SIGKILL)
	}
	t.Logf("SIGKILL to shards %v at %d records", victims, at)
	for i, p := range procs {
		if !slices.Contains(victims, i) {
			if err := p.Err(); err != nil {
				t.Fatalf("shard %d: %v\n%s", i, err, p.Out)
			}
		}
	}
	for _, i := range victims {
		<-procs[i].Done()
	}
	// An upsert a victim sent whole before it died may still be landing: count
	// once two reads half a second apart agree.
	before := chroma.count(t, "shards")
	for {
		time.Sleep(500 * time.Millisecond)
		n := chroma.count(t, "shards")
		if n == before {
			break
		}
		before = n
	}
	embedded := 0
	for _, i := range victims {
		out, err := exec.Command(bin, args(i)...).CombinedOutput()
		if err != nil {
			t.Fatalf("rerun of shard %d: %v\n%s", i, err, out)
		}
		var e, r int
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "embedding done") {
				fmt.Sscanf(l[strings.Index(l, "embedded="):], "embedded=%d resumed=%d", &e, &r)
			}
		}
		embedded += e
		t.Logf("rerun of shard %d: embedded %d, resumed %d", i, e, r)
	}
	if before+embedded != n {
		t.Fatalf("the collection held %d records before the reruns, which embedded %d: want %d together (a rerun embedded what was there)", before, embedded, n)
	}
	checkCollection(t, chroma.read(t, "shards"), readJSONL(t, ref))
}

// TestEmbedChromaStoreFails: a server that is not there stops the job before the
// model loads; a write Chroma refuses stops it naming the input line; a server
// killed mid-run stops it once the retries are spent. After each, the same command
// (with the input fixed, or the server back) completes the collection with each id
// exactly once.
func TestEmbedChromaStoreFails(t *testing.T) {
	bin, model := e2e.Paths(t)
	venv := chromaVenv(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	const n = 160
	writeChromaCorpus(t, in, n)
	common := []string{"--model", model, "--input", in, "--threads", "1", "--batch-size", "4", "--in-flight", "1"}
	ref := filepath.Join(dir, "ref.jsonl")
	runEmbedCmd(t, bin, append(common, "--output", ref)...)
	common = append(common, "--passthrough", "n")

	addr := e2e.FreeAddr(t)
	embedTo := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append(append([]string{"embed"}, common...), args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	url := "chroma://" + addr + "/fails"
	start := time.Now()
	out, err := embedTo("--output", url)
	if e2e.ExitCode(err) != 1 || !strings.Contains(out, "Chroma collection fails at http://"+addr+" is unreachable: ") ||
		!strings.Contains(out, "connection refused (5 tries); start it, or check the host and port of --output") || strings.Contains(out, "warm worker ready") {
		t.Fatalf("no server: %v\n%s", err, out)
	}
	t.Logf("no server: failed in %s", time.Since(start).Round(time.Millisecond))

	chroma := startChroma(t, venv, filepath.Join(dir, "chroma"), addr)
	// A number Chroma cannot hold (1e400) on line 42: the batch of lines 41-44 is
	// refused, the 40 records before it stay.
	orig, _ := os.ReadFile(in)
	lines := strings.SplitAfter(string(orig), "\n")
	lines[41] = strings.Replace(lines[41], `"n":41`, `"n":1e400`, 1)
	if err := os.WriteFile(in, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = embedTo("--output", url)
	want := `write input lines 41-44: Chroma collection fails at http://` + addr +
		`: Chroma refused it (400 InvalidArgumentError): Failed to parse the request body as JSON: metadatas[1].n: number out of range`
	if e2e.ExitCode(err) != 1 || !strings.Contains(out, want) || !strings.Contains(out, `(record 1 of the request is input line 42, id "doc-041"); what was written before is kept, and the same command resumes after it`) {
		t.Fatalf("refused write: %v\n%s", err, out)
	}
	if got := chroma.count(t, "fails"); got != 40 {
		t.Fatalf("after the refused write the collection holds %d records, want 40", got)
	}
	if err := os.WriteFile(in, orig, 0o644); err != nil {
		t.Fatal(err)
	}

	// The server killed mid-run: the job tries 5 times over about 8 s, then stops.
	job := e2e.Start(t, exec.Command(bin, append(append([]string{"embed"}, common...), "--output", url)...))
	for chroma.count(t, "fails") < 80 {
		if job.Exited() {
			t.Fatalf("the job finished before the server was killed\n%s", job.Out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	chroma.proc.Kill()
	if code := e2e.ExitCode(job.Err()); code != 1 || !strings.Contains(job.Out.String(), "is unreachable: ") || !strings.Contains(job.Out.String(), "(5 tries)") {
		t.Fatalf("server killed: exit %d\n%s", code, job.Out)
	}
	chroma = startChroma(t, venv, chroma.dir, addr)
	out, err = embedTo("--output", url)
	if err != nil || !strings.Contains(out, "embedding done") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	t.Logf("resumed: %s", out[strings.LastIndex(out, "embedding done"):])
	checkCollection(t, chroma.read(t, "fails"), readJSONL(t, ref))
}

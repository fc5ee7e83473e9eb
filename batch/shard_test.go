package batch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseShard(t *testing.T) {
	for in, want := range map[string]string{"0/1": "0/1", "3/8": "3/8", "8/8": "error", "-1/2": "error", "1/0": "error", "1": "error", "1/2x": "error", "": "error"} {
		sh, err := ParseShard(in)
		got := sh.String()
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("ParseShard(%q) = %s (%v), want %s", in, got, err, want)
		}
	}
	if got := ShardPath("out/vectors.npy", Shard{2, 16}); got != "out/vectors-00002-of-00016.npy" {
		t.Errorf("ShardPath = %s", got)
	}
	if got := WorkPath(ShardPath("v.parquet", Shard{0, 2})); got != "v-00000-of-00002.parquet.npy" {
		t.Errorf("WorkPath = %s", got)
	}
}

// TestShardsPartitionLines: for inputs with long and short lines, blank lines, and no
// final newline, the N slices hold every line exactly once, in order, with the line
// numbers of the whole file.
func TestShardsPartitionLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 40 {
		var b strings.Builder
		nLines := rng.IntN(60)
		for i := range nLines {
			b.WriteString(strings.Repeat(string(rune('a'+i%26)), rng.IntN(3)*rng.IntN(50)))
			if i < nLines-1 || trial%2 == 0 {
				b.WriteByte('\n')
			}
		}
		input := b.String()
		want, _ := readAll(t, input, ReaderConfig{})
		for _, n := range []int{1, 2, 3, 7, 64} {
			var got []readResult
			var prevEnd int64
			for i := range n {
				si, err := OpenShard(strings.NewReader(input), int64(len(input)), Shard{i, n})
				if err != nil {
					t.Fatal(err)
				}
				if si.Start != prevEnd {
					t.Fatalf("trial %d, %d shards: shard %d starts at %d, the previous ended at %d", trial, n, i, si.Start, prevEnd)
				}
				prevEnd = si.End
				r := NewReader(si.Reader(strings.NewReader(input)), ReaderConfig{FirstLine: si.FirstLine})
				for {
					it, err := r.Next()
					if err != nil {
						break
					}
					got = append(got, readResult{id: string(it.ID), text: it.Text, line: it.Line})
				}
			}
			if prevEnd != int64(len(input)) {
				t.Fatalf("the last shard ends at %d of %d", prevEnd, len(input))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("trial %d, %d shards: items\n%v\nwant\n%v", trial, n, got, want)
			}
		}
	}
}

// runShards runs an n-shard job over the input file, each shard as its own Job
// writing ShardPath(out) (WorkPath of it when out is .parquet).
func runShards(t *testing.T, input, out string, format Format, n int) {
	t.Helper()
	f, err := os.Open(input)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	for i := range n {
		si, err := OpenShard(f, fi.Size(), Shard{i, n})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := runJob(t, &Job{Input: si.Reader(f), Reader: ReaderConfig{Format: JSONL, FirstLine: si.FirstLine}, Output: WorkPath(ShardPath(out, Shard{i, n})), Format: format, Embedder: &fakeEmbedder{}, BatchSize: 7}); err != nil {
			t.Fatal(err)
		}
	}
}

func runMerge(t *testing.T, input, out string, format Format, parts []string, m Merge) (MergeStats, error) {
	t.Helper()
	f, err := os.Open(input)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	m.Input, m.InputSize, m.Parts, m.Output, m.Format, m.Logger = f, fi.Size(), parts, out, format, quietLogger()
	m.Reader.Format = JSONL
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return m.Run(ctx)
}

func jsonlCorpus(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"d%d","text":"text %d %s","title":"T%d","n":%d}`+"\n", i, i, strings.Repeat("y", i%17), i, i)
		if i%50 == 7 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// TestMergeEqualsSingleRun: N shards merged are byte-identical to one run over the
// whole input, for JSONL and .npy, and the merge refuses a missing part, a missing
// row, a repeated or foreign row, and rows out of order, writing nothing.
func TestMergeEqualsSingleRun(t *testing.T) {
	for _, format := range []Format{FormatJSONL, FormatNPY} {
		t.Run(format.String(), func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.jsonl")
			os.WriteFile(in, []byte(jsonlCorpus(300)), 0o644)
			ref := filepath.Join(dir, "ref."+format.String())
			runShards(t, in, ref, format, 1)
			single := ShardPath(ref, Shard{0, 1})
			out := filepath.Join(dir, "out."+format.String())
			const n = 5
			runShards(t, in, out, format, n)
			parts := make([]string, n)
			for i := range parts {
				parts[i] = ShardPath(out, Shard{i, n})
			}
			st, err := runMerge(t, in, out, format, parts, Merge{})
			if err != nil {
				t.Fatal(err)
			}
			if st.Rows != 300 || st.Missing != 0 {
				t.Errorf("stats %+v, want 300 rows", st)
			}
			requireSameFiles(t, single, out)
			if format == FormatNPY {
				requireSameFiles(t, IDsPath(single), IDsPath(out))
			}

			refuse := func(name string, damage func(), want string) {
				t.Helper()
				os.Remove(out)
				damage()
				_, err := runMerge(t, in, out, format, parts, Merge{})
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: err = %v, want it to contain %q", name, err, want)
				}
				if _, err := os.Stat(out); err == nil {
					t.Errorf("%s: the merge wrote an output", name)
				}
				if _, err := os.Stat(out + ".merging"); err == nil {
					t.Errorf("%s: the merge left its temporary output", name)
				}
			}
			save := func(p string) func() {
				b, _ := os.ReadFile(p)
				var ids []byte
				if format == FormatNPY {
					ids, _ = os.ReadFile(IDsPath(p))
				}
				return func() {
					os.WriteFile(p, b, 0o644)
					if format == FormatNPY {
						os.WriteFile(IDsPath(p), ids, 0o644)
					}
				}
			}
			restore := save(parts[2])
			os.Rename(parts[2], parts[2]+".away")
			refuse("missing part", func() {}, "part 2 of 5: open "+parts[2]+": no such file or directory")
			os.Rename(parts[2]+".away", parts[2])

			ids, _ := rowsOf(t, parts[2], format)
			k := len(ids)
			rewriteRows(t, parts[2], format, seqTo(k-1), nil)
			refuse("missing row", func() {}, fmt.Sprintf("1 input items have no vector in the parts, the first on line %d (id %s)", lineOf(t, in, ids[k-1]), ids[k-1]))
			st, err = runMerge(t, in, out, format, parts, Merge{AllowMissing: true})
			if err != nil || st.Missing != 1 || st.Rows != 299 {
				t.Errorf("AllowMissing: %+v, %v; want 299 rows and 1 missing", st, err)
			}
			restore()

			rewriteRows(t, parts[2], format, append(seqTo(k), 3), nil)
			refuse("repeated row", func() {}, fmt.Sprintf("part %s: row %d has the id %s, which is not the next item of its slice", parts[2], k+1, ids[3]))
			restore()
			rewriteRows(t, parts[2], format, seqTo(k), map[int]string{5: `"zz"`})
			refuse("foreign row", func() {}, fmt.Sprintf("part %s: row 6 has the id \"zz\", which is not the next item of its slice", parts[2]))
			restore()
			order := seqTo(k)
			order[4], order[5] = order[5], order[4]
			rewriteRows(t, parts[2], format, order, nil)
			refuse("swapped rows", func() {}, fmt.Sprintf("part %s: row 6 has the id %s, which is not the next item of its slice", parts[2], ids[4]))
			restore()
		})
	}
}

func seqTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func lineOf(t *testing.T, input, id string) int {
	b, _ := os.ReadFile(input)
	for i, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, `{"id":`+id+",") {
			return i + 1
		}
	}
	t.Fatalf("no line with id %s", id)
	return 0
}

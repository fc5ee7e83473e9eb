package batch

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// TestMergeParquet writes a Parquet output from .npy parts with passthrough fields and
// reads it back through parquet-go's own reader: the schema, every id, vector and
// field. (A pyarrow reader checks the same file in the Python suite.)
func TestMergeParquet(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(jsonlCorpus(40)+`{"id":77,"text":"no title","n":{"a":[1, 2]}}`+"\n"), 0o644)
	out := filepath.Join(dir, "v.parquet")
	runShards(t, in, out, FormatNPY, 3)
	parts := make([]string, 3)
	for i := range parts {
		parts[i] = WorkPath(ShardPath(out, Shard{i, 3}))
	}
	st, err := runMerge(t, in, out, FormatParquet, parts, Merge{Passthrough: []string{"title", "n"}})
	if err != nil || st.Rows != 41 {
		t.Fatalf("merge: %+v, %v", st, err)
	}
	type row struct {
		ID        string    `parquet:"id"`
		Embedding []float32 `parquet:"embedding,list"`
		Title     *string   `parquet:"title,optional"`
		N         *string   `parquet:"n,optional"`
	}
	rows, err := parquet.ReadFile[row](out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 41 {
		t.Fatalf("%d rows, want 41", len(rows))
	}
	for i, r := range rows[:40] {
		text := fmt.Sprintf("text %d %s", i, string(repeatY(i%17)))
		if r.ID != fmt.Sprintf("d%d", i) || fmt.Sprint(r.Embedding) != fmt.Sprint(fakeVector(text)) || r.Title == nil || *r.Title != fmt.Sprintf("T%d", i) || r.N == nil || *r.N != fmt.Sprint(i) {
			t.Fatalf("row %d = %+v, want id d%d, vector %v, title T%d, n %d", i, r, i, fakeVector(text), i, i)
		}
	}
	if last := rows[40]; last.ID != "77" || last.Title != nil || last.N == nil || *last.N != `{"a":[1,2]}` {
		t.Errorf("last row %+v: want id 77, no title, n as compact JSON", last)
	}
}

func repeatY(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'y'
	}
	return b
}

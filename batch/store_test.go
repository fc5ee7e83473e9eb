package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// memStore is a Store in memory that upserts by id, as Chroma does, and counts
// every record written (a rewrite too). failAt makes the write of the batch holding
// that id fail.
type memStore struct {
	mu      sync.Mutex
	recs    map[string]Record
	writes  int
	lookups int
	failAt  string
}

func (m *memStore) Open(context.Context, int) error { return nil }
func (m *memStore) String() string                  { return "the test store" }

func (m *memStore) Has(_ context.Context, ids []string) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookups++
	out := make([]bool, len(ids))
	for i, id := range ids {
		_, out[i] = m.recs[id]
	}
	return out, nil
}

func (m *memStore) Write(_ context.Context, recs []Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		if r.ID == m.failAt {
			return errors.New("the test store: refused: bad metadata")
		}
	}
	if m.recs == nil {
		m.recs = map[string]Record{}
	}
	for _, r := range recs {
		m.recs[r.ID] = r
		m.writes++
	}
	return nil
}

func taggedCorpus(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"id":"doc-%d","text":"text of item %d %s","tag":%d}`+"\n", i, i, strings.Repeat("y", i%7), i)
	}
	return b.String()
}

func storeJob(input string, st Store) *Job {
	return &Job{
		Input: strings.NewReader(input), Reader: ReaderConfig{Format: JSONL, Fields: []string{"tag"}},
		Store: st, Dim: testDim, Embedder: &fakeEmbedder{}, BatchSize: 4, InFlight: 2, Logger: quietLogger(),
	}
}

// TestJobStoreResume: a job into a Store that already holds some of the input's ids
// (what a killed run leaves, and a record of another input) embeds only the others,
// counts the held ones as resumed, and leaves the store with each input id once,
// every vector the embedder's for its text, the passthrough fields with it, and the
// foreign record untouched.
func TestJobStoreResume(t *testing.T) {
	const n = 30
	input := taggedCorpus(n)
	st := &memStore{recs: map[string]Record{}}
	// A first run stopped by a refused write at doc-13 (batch 4: lines 13-16)...
	st.failAt = "doc-13"
	_, err := storeJob(input, st).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "write input lines 13-16: the test store: refused: bad metadata; what was written before is kept") {
		t.Fatalf("the refused write: err = %v", err)
	}
	if len(st.recs) != 12 {
		t.Fatalf("after the refusal the store holds %d records, want the 12 of the batches before it", len(st.recs))
	}
	st.recs["other-input"] = Record{ID: "other-input"}
	st.failAt = ""
	writes := st.writes
	stats, err := storeJob(input, st).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if stats.Resumed != 12 || stats.Embedded != n-12 || stats.Dropped != 0 {
		t.Fatalf("stats %+v: want 12 resumed, %d embedded, none dropped", stats, n-12)
	}
	if got := st.writes - writes; got != n-12 {
		t.Fatalf("the resumed run wrote %d records, want %d", got, n-12)
	}
	if len(st.recs) != n+1 {
		t.Fatalf("the store holds %d records, want %d and the foreign one", len(st.recs), n)
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("doc-%d", i)
		r, ok := st.recs[id]
		text := fmt.Sprintf("text of item %d %s", i, strings.Repeat("y", i%7))
		switch {
		case !ok:
			t.Fatalf("%s missing", id)
		case r.Item.Text != text || !slices.Equal(r.Vector, fakeVector(text)):
			t.Fatalf("%s: text %q vector %v, want %q %v", id, r.Item.Text, r.Vector, text, fakeVector(text))
		case string(r.Item.Fields["tag"]) != fmt.Sprint(i) || r.Item.Line != int64(i):
			t.Fatalf("%s: fields %s line %d", id, r.Item.Fields, r.Item.Line)
		}
	}

	// --overwrite embeds and writes everything again, with no lookups.
	writes, lookups := st.writes, st.lookups
	j := storeJob(input, st)
	j.Overwrite = true
	if stats, err = j.Run(context.Background()); err != nil || stats.Embedded != n || stats.Resumed != 0 {
		t.Fatalf("overwrite: %+v %v", stats, err)
	}
	if st.writes-writes != n || st.lookups != lookups || len(st.recs) != n+1 {
		t.Fatalf("overwrite wrote %d records after %d lookups; the store holds %d", st.writes-writes, st.lookups-lookups, len(st.recs))
	}
}

// TestJobStoreTextIDs: a store's ids are text, so "7" after 7 is a repeated id.
func TestJobStoreTextIDs(t *testing.T) {
	input := `{"id":7,"text":"a"}` + "\n" + `{"id":"7","text":"b"}` + "\n"
	_, err := storeJob(input, &memStore{}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `input line 2 repeats the id "7" of line 1`) {
		t.Fatalf("err = %v", err)
	}
}

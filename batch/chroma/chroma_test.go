package chroma

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/batch"
)

// The real server's behaviour (round trip, resume after kill -9, shards, a server
// that goes away) is tested through the binary against `chroma run` in
// cmd/embed-stack/embed_chroma_e2e_test.go. These tests pin what a real server
// cannot be made to do on demand: fail a given number of times, or never listen.

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in, base, tenant, db, coll, err string
	}{
		{in: "chroma://localhost:8001/docs", base: "http://localhost:8001", tenant: DefaultTenant, db: DefaultDatabase, coll: "docs"},
		{in: "chroma://db.internal/my.docs-v2", base: "http://db.internal:8000", tenant: DefaultTenant, db: DefaultDatabase, coll: "my.docs-v2"},
		{in: "chroma://[::1]:9/abc?tenant=t1&database=d1", base: "http://[::1]:9", tenant: "t1", db: "d1", coll: "abc"},
		{in: "chroma://localhost:8000/", err: "the path must be one collection name"},
		{in: "chroma://localhost:8000/a/b", err: "the path must be one collection name"},
		{in: "chroma:///docs", err: "want chroma://HOST[:PORT]/COLLECTION"},
		{in: "chroma://localhost/x", err: `Chroma refuses the collection name "x"`},
		{in: "chroma://localhost/docs-", err: `Chroma refuses the collection name "docs-"`},
		{in: "chroma://localhost/docs?space=l2", err: `unknown parameter "space" (tenant or database)`},
		{in: "chroma://localhost/docs?tenant=", err: "give tenant once, not empty"},
	} {
		st, err := ParseURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if st.BaseURL != c.base || st.Tenant != c.tenant || st.Database != c.db || st.Collection != c.coll {
			t.Errorf("%s: %+v", c.in, st)
		}
	}
}

func TestMetadata(t *testing.T) {
	fields := map[string]json.RawMessage{
		"s": json.RawMessage(`"a \"b\""`), "i": json.RawMessage(`12`), "f": json.RawMessage(`-1.5e3`),
		"b": json.RawMessage(`true`), "null": json.RawMessage(`null`),
		"tags": json.RawMessage(`["x", "y"]`), "nums": json.RawMessage(`[1, 2.5]`),
		"mixed": json.RawMessage(`[1, "a"]`), "empty": json.RawMessage(`[]`),
		"obj": json.RawMessage(`{"k": [1, {"z": null}]}`), "nested": json.RawMessage(`[[1]]`),
	}
	got := string(Metadata(fields))
	want := `{"b":true,"f":-1.5e3,"i":12,"mixed":"[1,\"a\"]","nested":"[[1]]","nums":[1,2.5],"obj":"{\"k\":[1,{\"z\":null}]}","s":"a \"b\"","tags":["x","y"]}`
	if got != want {
		t.Fatalf("Metadata:\n got %s\nwant %s", got, want)
	}
	if got := string(Metadata(map[string]json.RawMessage{"n": json.RawMessage("null")})); got != "null" {
		t.Fatalf("only nulls: %s", got)
	}
}

// fakeChroma answers the routes Store uses; upsert fails with status fail (and the
// body failBody) while failures > 0.
type fakeChroma struct {
	failures atomic.Int32
	fail     int
	failBody string
	dim      string // the collection's dimension: "null" or a number
	upserts  atomic.Int32
	// meta is the collection's metadata as JSON ("" : null), count its records.
	meta, count string
}

func (f *fakeChroma) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const coll = "/api/v2/tenants/default_tenant/databases/default_database/collections"
	switch {
	case r.URL.Path == "/api/v2/pre-flight-checks":
		io.WriteString(w, `{"max_batch_size":2,"supports_base64_encoding":true}`)
	case r.Method == http.MethodGet && r.URL.Path == coll+"/docs":
		meta := f.meta
		if meta == "" {
			meta = "null"
		}
		io.WriteString(w, `{"id":"c0ffee","name":"docs","dimension":`+f.dim+`,"metadata":`+meta+`,"configuration_json":{"hnsw":{"space":"l2"}}}`)
	case r.URL.Path == coll+"/c0ffee/count":
		if f.count == "" {
			f.count = "0"
		}
		io.WriteString(w, f.count)
	case r.URL.Path == coll+"/c0ffee/upsert":
		if f.failures.Add(-1) >= 0 {
			w.WriteHeader(f.fail)
			io.WriteString(w, f.failBody)
			return
		}
		var body upsert
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.IDs) > 2 || body.Documents != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.upserts.Add(1)
		io.WriteString(w, `{}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"NotFoundError","message":"no route"}`)
	}
}

func openFake(t *testing.T, f *fakeChroma) *Store {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	st := &Store{BaseURL: srv.URL, Collection: "docs", Logger: slog.New(slog.DiscardHandler),
		wait: func(int) time.Duration { return time.Millisecond }}
	if err := st.Open(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	return st
}

func records(n int) []batch.Record {
	recs := make([]batch.Record, n)
	for i := range recs {
		recs[i] = batch.Record{ID: string(rune('a' + i)), Item: batch.Item{Line: int64(10 + i)}, Vector: []float32{1, 0, 0}}
	}
	return recs
}

// TestWriteRetries: a server answering 503 is tried again, and the records go in
// requests of at most its max_batch_size; after DefaultAttempts the job is told.
func TestWriteRetries(t *testing.T) {
	f := &fakeChroma{fail: http.StatusServiceUnavailable, failBody: "upstream gone", dim: "null"}
	st := openFake(t, f)
	f.failures.Store(DefaultAttempts - 1)
	if err := st.Write(context.Background(), records(5)); err != nil {
		t.Fatal(err)
	}
	if n := f.upserts.Load(); n != 3 {
		t.Fatalf("%d upserts for 5 records at 2 a request, want 3", n)
	}
	f.failures.Store(DefaultAttempts)
	err := st.Write(context.Background(), records(1))
	want := "Chroma collection docs at " + st.BaseURL + ": Chroma refused it (503): upstream gone (5 tries)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

// TestWriteRefused: a 4xx is not tried again, and the record Chroma points at is
// named by its input line.
func TestWriteRefused(t *testing.T) {
	f := &fakeChroma{fail: http.StatusBadRequest, dim: "3",
		failBody: `{"error":"InvalidArgumentError","message":"Failed to parse the request body as JSON: metadatas[1].n: number out of range at line 1 column 59"}`}
	st := openFake(t, f)
	f.failures.Store(1)
	err := st.Write(context.Background(), records(2))
	want := `Chroma collection docs at ` + st.BaseURL + `: Chroma refused it (400 InvalidArgumentError): Failed to parse the request body as JSON: metadatas[1].n: number out of range at line 1 column 59 (record 1 of the request is input line 11, id "b")`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if f.failures.Load() != 0 {
		t.Fatalf("a 400 was tried again")
	}
}

// TestOpenRefuses: another dimension, and a server that never listens.
func TestOpenRefuses(t *testing.T) {
	srv := httptest.NewServer(&fakeChroma{dim: "8"})
	defer srv.Close()
	st := &Store{BaseURL: srv.URL, Collection: "docs", Logger: slog.New(slog.DiscardHandler)}
	err := st.Open(context.Background(), 3)
	if err == nil || !strings.Contains(err.Error(), "holds 8-dimensional vectors and this job makes 3") {
		t.Fatalf("err = %v", err)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	st = &Store{BaseURL: url, Collection: "docs", Attempts: 2, Logger: slog.New(slog.DiscardHandler), wait: func(int) time.Duration { return time.Millisecond }}
	err = st.Open(context.Background(), 3)
	if err == nil || !strings.Contains(err.Error(), "Chroma collection docs at "+url+" is unreachable: ") || !strings.Contains(err.Error(), "connection refused (2 tries); start it, or check the host and port of --output") {
		t.Fatalf("err = %v", err)
	}
}

// TestOpenChecksJob: a collection holding records whose job record (its metadata)
// differs from the job's is refused, naming the difference; the same job, an empty
// collection, and one without a record (warned) are used.
func TestOpenChecksJob(t *testing.T) {
	job := &batch.JobRecord{ModelSHA256: strings.Repeat("ab", 32), Weights: "BF16", Pooling: "last", InputType: "document", Dimensions: 3}
	other := *job
	other.Pooling = "mean"
	text := func(j batch.JobRecord) string {
		b, _ := json.Marshal(j)
		m, _ := json.Marshal(map[string]string{JobMetadataKey: string(b)})
		return string(m)
	}
	for _, tc := range []struct {
		name, meta, count, want string
	}{
		{"same job", text(*job), "5", ""},
		{"another job", text(other), "5", "holds 5 records of another job: pooling mean (this job: last)"},
		{"another job, empty", text(other), "0", ""},
		{"no record", "", "5", ""},
	} {
		srv := httptest.NewServer(&fakeChroma{dim: "3", meta: tc.meta, count: tc.count})
		st := &Store{BaseURL: srv.URL, Collection: "docs", Job: job, Logger: slog.New(slog.DiscardHandler)}
		err := st.Open(context.Background(), 3)
		srv.Close()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

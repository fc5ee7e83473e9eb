package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testDim = 4

// fakeVector is a deterministic function of the text, so two runs over the same
// input must write the same bytes.
func fakeVector(text string) []float32 {
	var sum, xor byte
	for i := 0; i < len(text); i++ {
		sum += text[i]
		xor ^= text[i]
	}
	return []float32{float32(len(text)), float32(sum) / 7, float32(xor) * 0.001, 1.0 / 3}
}

// fakeEmbedder embeds with fakeVector. It refuses texts holding "BAD" with an
// ItemError, fails the first `transient` calls with errTransient, and calls
// onBatch (if set) before each batch.
type fakeEmbedder struct {
	transient atomic.Int32
	calls     atomic.Int32
	onBatch   func(n int32) error
}

var errTransient = errors.New("worker restarting")

func (f *fakeEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	n := f.calls.Add(1)
	if f.onBatch != nil {
		if err := f.onBatch(n); err != nil {
			return nil, err
		}
	}
	if f.transient.Add(-1) >= 0 {
		return nil, errTransient
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if strings.Contains(t, "BAD") {
			return nil, &ItemError{Index: i, Err: fmt.Errorf("input %d has too many tokens", i)}
		}
		out[i] = fakeVector(t)
	}
	return out, nil
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func corpus(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line number %d with some words %s\n", i, strings.Repeat("x", i%13))
	}
	return b.String()
}

// wantJSONL is the JSONL the job must write for plain-line input, built here
// independently of the sink.
func wantJSONL(input string, skip func(line int) bool) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimSuffix(input, "\n"), "\n") {
		if line == "" || (skip != nil && skip(i+1)) {
			continue
		}
		v := fakeVector(line)
		parts := make([]string, len(v))
		for j, x := range v {
			parts[j] = fmt.Sprint(x) // Go prints float32 shortest, as the sink must
		}
		fmt.Fprintf(&b, `{"id":%d,"embedding":[%s]}`+"\n", i+1, strings.Join(parts, ","))
	}
	return b.String()
}

func runJob(t *testing.T, j *Job) (Stats, error) {
	t.Helper()
	if j.Logger == nil {
		j.Logger = quietLogger()
	}
	if j.Dim == 0 {
		j.Dim = testDim
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return j.Run(ctx)
}

func TestJobJSONL(t *testing.T) {
	input := corpus(500) + "\n" + corpus(3)
	for _, tc := range []struct{ batch, inFlight int }{{1, 1}, {7, 2}, {64, 4}, {1000, 2}} {
		t.Run(fmt.Sprintf("batch%d/inflight%d", tc.batch, tc.inFlight), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "v.jsonl")
			st, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Embedder: &fakeEmbedder{}, BatchSize: tc.batch, InFlight: tc.inFlight})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(out)
			if want := wantJSONL(input, nil); string(got) != want {
				t.Fatalf("output differs from the expected records (%d vs %d bytes); first line %q", len(got), len(want), firstLine(got))
			}
			if st.Embedded != 503 || st.Blank != 1 || st.Resumed != 0 || st.Invalid != 0 {
				t.Errorf("stats %+v, want 503 embedded, 1 blank", st)
			}
		})
	}
}

func firstLine(b []byte) string {
	l, _, _ := bytes.Cut(b, []byte("\n"))
	return string(l)
}

// readNPY parses a .npy file independently of parseNPYHeader: magic, version 1.0,
// the header dictionary, 64-byte alignment, and the float32 data.
func readNPY(t *testing.T, path string) (rows, dim int, data []float32) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:6]) != "\x93NUMPY" || b[6] != 1 || b[7] != 0 {
		t.Fatalf("bad magic/version % x", b[:8])
	}
	hl := int(binary.LittleEndian.Uint16(b[8:10]))
	if (10+hl)%64 != 0 {
		t.Errorf("data offset %d is not 64-byte aligned", 10+hl)
	}
	header := string(b[10 : 10+hl])
	if !strings.HasSuffix(header, "\n") || !strings.Contains(header, "'descr': '<f4'") || !strings.Contains(header, "'fortran_order': False") {
		t.Fatalf("header %q", header)
	}
	if _, err := fmt.Sscanf(header[strings.Index(header, "'shape': (")+len("'shape': ("):], "%d, %d)", &rows, &dim); err != nil {
		t.Fatalf("shape in %q: %v", header, err)
	}
	body := b[10+hl:]
	if len(body) != rows*dim*4 {
		t.Fatalf("%d data bytes for shape (%d, %d)", len(body), rows, dim)
	}
	data = make([]float32, rows*dim)
	for i := range data {
		data[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:]))
	}
	return rows, dim, data
}

func TestJobNPY(t *testing.T) {
	input := corpus(300)
	out := filepath.Join(t.TempDir(), "v.npy")
	if _, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: FormatNPY, Embedder: &fakeEmbedder{}, BatchSize: 16}); err != nil {
		t.Fatal(err)
	}
	rows, dim, data := readNPY(t, out)
	if rows != 300 || dim != testDim {
		t.Fatalf("shape (%d, %d), want (300, %d)", rows, dim, testDim)
	}
	ids, _ := os.ReadFile(IDsPath(out))
	lines := strings.Split(strings.TrimSuffix(input, "\n"), "\n")
	idLines := strings.Split(strings.TrimSuffix(string(ids), "\n"), "\n")
	if len(idLines) != 300 {
		t.Fatalf("%d ids, want 300", len(idLines))
	}
	for i, line := range lines {
		if idLines[i] != fmt.Sprint(i+1) {
			t.Fatalf("ids line %d = %q, want %d", i+1, idLines[i], i+1)
		}
		want := fakeVector(line)
		for j := range want {
			if math.Float32bits(data[i*dim+j]) != math.Float32bits(want[j]) {
				t.Fatalf("row %d col %d = %v, want %v", i, j, data[i*dim+j], want[j])
			}
		}
	}
}

// TestJobResume interrupts a job after some batches (cancellation, or an embedder
// error), damages the tail as a kill mid-write would, and resumes: the result must be
// byte-identical to an uninterrupted run, with no id twice.
func TestJobResume(t *testing.T) {
	input := corpus(1000)
	for _, format := range []Format{FormatJSONL, FormatNPY} {
		for _, stop := range []string{"cancel", "error"} {
			t.Run(format.String()+"/"+stop, func(t *testing.T) {
				dir := t.TempDir()
				ref := filepath.Join(dir, "ref."+format.String())
				if _, err := runJob(t, &Job{Input: strings.NewReader(input), Output: ref, Format: format, Embedder: &fakeEmbedder{}, BatchSize: 10}); err != nil {
					t.Fatal(err)
				}

				out := filepath.Join(dir, "out."+format.String())
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				boom := errors.New("worker died for good")
				emb := &fakeEmbedder{onBatch: func(n int32) error {
					if n < 37 {
						return nil
					}
					if stop == "cancel" {
						cancel()
						<-ctx.Done()
						return ctx.Err()
					}
					return boom
				}}
				st, err := (&Job{Input: strings.NewReader(input), Output: out, Format: format, Dim: testDim, Embedder: emb, BatchSize: 10, Logger: quietLogger()}).Run(ctx)
				switch {
				case stop == "cancel" && !errors.Is(err, context.Canceled):
					t.Fatalf("interrupted run: err %v, want context.Canceled", err)
				case stop == "error" && !errors.Is(err, boom):
					t.Fatalf("failed run: err %v, want %v", err, boom)
				}
				if st.Embedded < 300 || st.Embedded > 370 || st.Embedded%10 != 0 {
					t.Fatalf("first run embedded %d, want whole batches, 300..370", st.Embedded)
				}
				// A kill mid-write leaves half a record.
				damage(t, out, format)

				st2, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: format, Embedder: &fakeEmbedder{}, BatchSize: 10})
				if err != nil {
					t.Fatal(err)
				}
				if st2.Resumed != st.Embedded || st2.Embedded != 1000-st.Embedded || st2.Dropped != 0 {
					t.Errorf("resume stats %+v after %d embedded; want them resumed and the rest embedded", st2, st.Embedded)
				}
				requireSameFiles(t, ref, out)
				if format == FormatNPY {
					requireSameFiles(t, IDsPath(ref), IDsPath(out))
				}

				// Resuming a complete output embeds nothing.
				emb3 := &fakeEmbedder{}
				st3, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Format: format, Embedder: emb3})
				if err != nil || st3.Embedded != 0 || st3.Resumed != 1000 || emb3.calls.Load() != 0 {
					t.Errorf("rerun of a finished job: %+v, %d calls, err %v; want all 1000 resumed and no call", st3, emb3.calls.Load(), err)
				}
				requireSameFiles(t, ref, out)
			})
		}
	}
}

// damage appends half a record to an output, as a kill in the middle of a write
// leaves it.
func damage(t *testing.T, path string, format Format) {
	t.Helper()
	appendTo := func(p string, b []byte) {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if format == FormatJSONL {
		appendTo(path, []byte(`{"id":999,"embedding":[0.5,0.2`))
		return
	}
	appendTo(path, make([]byte, testDim*4+6)) // a whole row without its id, and a partial one
	appendTo(IDsPath(path), []byte("99"))
}

func requireSameFiles(t *testing.T, want, got string) {
	t.Helper()
	a, _ := os.ReadFile(want)
	b, _ := os.ReadFile(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("%s (%d bytes) differs from %s (%d bytes)", got, len(b), want, len(a))
	}
}

// TestJobResumeWithNewItems: items added to the input since the first run (here at the
// front and in the middle) are embedded on resume; those already written are not.
func TestJobResumeWithNewItems(t *testing.T) {
	out := filepath.Join(t.TempDir(), "v.jsonl")
	first := `{"id":"a","text":"alpha"}` + "\n" + `{"id":"c","text":"gamma"}` + "\n"
	if _, err := runJob(t, &Job{Input: strings.NewReader(first), Output: out, Reader: ReaderConfig{Format: JSONL}, Embedder: &fakeEmbedder{}}); err != nil {
		t.Fatal(err)
	}
	second := `{"id":"0","text":"zero"}` + "\n" + first[:len(first)/2] + `{"id":"b","text":"beta"}` + "\n" + first[len(first)/2:] + `{"id":"d","text":"delta"}` + "\n"
	st, err := runJob(t, &Job{Input: strings.NewReader(second), Output: out, Reader: ReaderConfig{Format: JSONL}, Embedder: &fakeEmbedder{}})
	if err != nil {
		t.Fatal(err)
	}
	// "a" and "c" are written; "0", "b" and "d" are new and appended.
	if st.Resumed != 2 || st.Embedded != 3 || st.Dropped != 0 {
		t.Errorf("stats %+v, want 2 resumed and 3 embedded", st)
	}
	ids := outputIDs(t, out)
	if want := `"a" "c" "0" "b" "d"`; ids != want {
		t.Errorf("ids %s, want %s", ids, want)
	}
}

func outputIDs(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		ids = append(ids, string(rec.ID))
	}
	return strings.Join(ids, " ")
}

func TestJobRefusesForeignOutput(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file, content, want string
	}{
		{"not records", "a.jsonl", "hello\n", "line 1 is not a record of this job"},
		{"other dimension", "b.jsonl", `{"id":1,"embedding":[1,2]}` + "\n", "it holds 2-dimensional vectors and this job makes 4"},
		{"other npy dimension", "c.npy", string(npyHeader(0, 8, idsText)), "it holds 8-dimensional vectors and this job makes 4"},
		{"foreign npy", "d.npy", strings.Replace(string(npyHeader(0, 4, idsText)), "<f4", "<f8", 1), "not little-endian float32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.file)
			os.WriteFile(p, []byte(tt.content), 0o644)
			os.WriteFile(IDsPath(p), nil, 0o644)
			_, err := runJob(t, &Job{Input: strings.NewReader("x\n"), Output: p, Format: FormatFor(p), Embedder: &fakeEmbedder{}})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--overwrite") {
				t.Fatalf("err = %v, want it to contain %q and name --overwrite", err, tt.want)
			}
			// --overwrite starts over.
			if _, err := runJob(t, &Job{Input: strings.NewReader("x\n"), Output: p, Format: FormatFor(p), Embedder: &fakeEmbedder{}, Overwrite: true}); err != nil {
				t.Fatalf("with Overwrite: %v", err)
			}
		})
	}
}

func TestJobInvalidItems(t *testing.T) {
	input := "good one\nthis is BAD\n\nanother good\nBAD again\nlast\n"
	t.Run("stop", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "v.jsonl")
		_, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Embedder: &fakeEmbedder{}, BatchSize: 2})
		want := "input line 2 (id 2): input 1 has too many tokens (fix the input, or pass --skip-invalid to skip such items)"
		if err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %q", err, want)
		}
	})
	t.Run("skip", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "v.jsonl")
		st, err := runJob(t, &Job{Input: strings.NewReader(input), Output: out, Embedder: &fakeEmbedder{}, BatchSize: 2, SkipInvalid: true})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(out)
		if want := wantJSONL(input, func(l int) bool { return l == 2 || l == 5 }); string(got) != want {
			t.Errorf("output\n%s\nwant\n%s", got, want)
		}
		if st.Invalid != 2 || st.Embedded != 3 || st.Blank != 1 {
			t.Errorf("stats %+v, want 2 invalid, 3 embedded, 1 blank", st)
		}
	})
	t.Run("bad line", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "v.jsonl")
		in := `{"id":1,"text":"a"}` + "\n{oops\n" + `{"id":2,"text":"b"}` + "\n"
		_, err := runJob(t, &Job{Input: strings.NewReader(in), Output: out, Reader: ReaderConfig{Format: JSONL}, Embedder: &fakeEmbedder{}})
		want := `input line 2 is not a JSON object (invalid character 'o' looking for beginning of object key string); it begins "{oops" (fix the input, or pass --skip-invalid to skip such lines)`
		if err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %q", err, want)
		}
		st, err := runJob(t, &Job{Input: strings.NewReader(in), Output: out, Reader: ReaderConfig{Format: JSONL}, Embedder: &fakeEmbedder{}, SkipInvalid: true})
		if err != nil || st.Invalid != 1 || outputIDs(t, out) != "1 2" {
			t.Fatalf("with SkipInvalid: %+v, ids %s, err %v; want ids 1 2 and 1 invalid", st, outputIDs(t, out), err)
		}
	})
}

func TestJobRetriesTransientErrors(t *testing.T) {
	retry := func(err error) (time.Duration, bool) { return time.Millisecond, errors.Is(err, errTransient) }
	for _, tc := range []struct {
		fails   int32
		wantErr bool
	}{{0, false}, {3, false}, {DefaultRetries, false}, {DefaultRetries + 1, true}} {
		t.Run(fmt.Sprint(tc.fails), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "v.jsonl")
			emb := &fakeEmbedder{}
			emb.transient.Store(tc.fails)
			_, err := runJob(t, &Job{Input: strings.NewReader("one\ntwo\n"), Output: out, Embedder: emb, Retryable: retry, InFlight: 1})
			if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, errTransient)) {
				t.Fatalf("err = %v after %d transient failures, want error: %v", err, tc.fails, tc.wantErr)
			}
			if !tc.wantErr && emb.calls.Load() != tc.fails+1 {
				t.Errorf("%d calls, want %d", emb.calls.Load(), tc.fails+1)
			}
		})
	}
}

// endless is an input that never ends, counting the bytes handed out.
type endless struct {
	n    atomic.Int64
	line []byte
	off  int
}

func (e *endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], e.line[e.off:])
		n += c
		e.off = (e.off + c) % len(e.line)
	}
	e.n.Add(int64(n))
	return n, nil
}

// TestJobBoundedMemory runs over an endless input with a slow embedder: the reader
// must stop reading ahead after a few batches (it never holds the input), so the
// bytes consumed stay proportional to the batches embedded, and cancellation ends
// the run.
func TestJobBoundedMemory(t *testing.T) {
	in := &endless{line: []byte(strings.Repeat("w", 99) + "\n")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var atBatch []int64
	emb := &fakeEmbedder{onBatch: func(n int32) error {
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		atBatch = append(atBatch, in.n.Load())
		mu.Unlock()
		if n == 200 {
			cancel()
		}
		return nil
	}}
	out := filepath.Join(t.TempDir(), "v.npy")
	st, err := (&Job{Input: in, Output: out, Format: FormatNPY, Dim: testDim, Embedder: emb, BatchSize: 100, InFlight: 2, Logger: quietLogger()}).Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// At batch k the reader may be ahead by the batches queued (InFlight in the order
	// channel, InFlight being embedded, one being filled) plus the read buffer (1 MiB).
	const lineBytes, batchBytes = 100, 100 * 100
	slack := int64(6*batchBytes + 2<<20)
	mu.Lock()
	defer mu.Unlock()
	for k, consumed := range atBatch {
		if limit := int64(k+1)*batchBytes + slack; consumed > limit {
			t.Fatalf("at batch %d the input was read to %d bytes; the bound is %d", k+1, consumed, limit)
		}
	}
	rows, _, _ := readNPY(t, out)
	if int64(rows) != st.Embedded || rows < 100 || rows%100 != 0 {
		t.Errorf("%d rows written, %d embedded; want whole batches", rows, st.Embedded)
	}
	_ = lineBytes
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

var _ io.Reader = (*endless)(nil)

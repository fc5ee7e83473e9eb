package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// embedFails runs `embed-stack embed` expecting exit status 1 and returns the error of
// its last log line (JSON logs).
func embedFails(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"embed", "--log-format", "json"}, args...)...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if code := e2e.ExitCode(err); code != 1 {
		t.Fatalf("exit status %d, want 1\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var rec struct{ Msg, Error string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil || rec.Msg != "embed-stack embed failed" {
		t.Fatalf("last log line %q (%v), want the failure", lines[len(lines)-1], err)
	}
	return rec.Error
}

// TestEmbedItemMessages: a refused item is named by its id and input line, with the
// limit worded for embeddings and the flag to change; a line that is not JSON is
// called that, with its first bytes; a repeated id names both lines (issue 16).
func TestEmbedItemMessages(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	long := strings.Repeat("light and colours ", 20)
	tests := []struct {
		name, input, want string
	}{
		{"too long", `{"id":"a","text":"alpha"}` + "\n" + `{"id":"b","text":"` + long + `"}` + "\n",
			`input line 2 (id "b"): the text has 62 tokens (the instruction, if any, and the end token included); the limit is 48 (--max-input-tokens) (fix the input, or pass --skip-invalid to skip such items)`},
		{"empty text", `{"id":"a","text":"alpha"}` + "\n\n" + `{"id":"c","text":""}` + "\n",
			`input line 3 (id "c") has an empty "text" field: there is no text to embed (fix the input, or pass --skip-invalid to skip such lines)`},
		{"not JSON", `{"id":"a","text":"alpha"}` + "\n" + `not json, but a sentence that goes on and on` + "\n",
			`input line 2 is not a JSON object (invalid character 'o' in literal null (expecting 'u')); it begins "not json, but a sentence that goes on an"… (fix the input, or pass --skip-invalid to skip such lines)`},
		{"repeated id", `{"id":7,"text":"alpha"}` + "\n" + `{"id":8,"text":"beta"}` + "\n" + `{"id":7,"text":"gamma"}` + "\n",
			`input line 3 repeats the id 7 of line 1: every id must be unique, since the output holds each id once (fix the input, or pass --skip-invalid to skip such lines)`},
		{"Latin-1", `{"id":"a","text":"alpha"}` + "\n" + `{"id":"b","text":"caf` + "\xe9" + `"}` + "\n",
			`input line 2 is not valid UTF-8 (byte 0xE9 at byte 22 of the line): the input must be UTF-8; convert it first (iconv -f latin1 -t utf-8, for a Latin-1 file) (fix the input, or pass --skip-invalid to skip such lines)`},
		{"far over the limit", `{"id":"a","text":"alpha"}` + "\n" + `{"id":"b","text":"` + strings.Repeat(long, 3) + `"}` + "\n",
			`input line 2 (id "b"): the text has more than 96 tokens (the instruction, if any, and the end token included); the limit is 48 (--max-input-tokens) (fix the input, or pass --skip-invalid to skip such items)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".jsonl")
			os.WriteFile(in, []byte(tt.input), 0o644)
			got := embedFails(t, bin, "--model", model, "--input", in, "--output", in+".out.jsonl",
				"--max-input-tokens", "48", "--warm-max-tokens", "48", "--threads", "1")
			if got != tt.want {
				t.Errorf("error\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestEmbedResumeRepairs: a partial output with a repeated record and a record of an
// id the input does not hold is resumed into exactly the uninterrupted run's bytes,
// exit status 0, the repair logged (issue 15: it used to keep both and exit 0).
func TestEmbedResumeRepairs(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	writeLines(t, in, corpusLines(t, 40))
	ref := filepath.Join(dir, "ref.jsonl")
	runEmbedCmd(t, bin, "--model", model, "--input", in, "--output", ref, "--threads", "1", "--batch-size", "8")
	b, _ := os.ReadFile(ref)
	lines := strings.SplitAfter(string(b), "\n")
	// Rows 1-12, row 5 again, a foreign row, then half a record.
	partial := strings.Join(lines[:12], "") + lines[4] + strings.Replace(lines[12], `{"id":13,`, `{"id":"x13",`, 1) + lines[13][:40]
	out := filepath.Join(dir, "out.jsonl")
	os.WriteFile(out, []byte(partial), 0o644)
	log := runEmbedCmd(t, bin, "--model", model, "--input", in, "--output", out, "--threads", "1", "--batch-size", "8", "--log-format", "json")
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, b) {
		t.Errorf("resumed output (%d bytes) differs from the uninterrupted run's (%d bytes)", len(got), len(b))
	}
	for _, want := range []string{
		`"msg":"the output holds rows that repeat an earlier row's id; they are dropped when the run completes","output":"` + out + `","rows":1,"first_row":13,"id":"5"`,
		`"msg":"repaired the output: dropped rows that repeated an earlier row's id or whose id the input does not hold","output":"` + out + `","repeated":1,"not_in_input":1,"first_dropped_id":"5"`,
		`"msg":"embedding done","embedded":28,"resumed":12,"invalid":0,"blank_lines":0,"dropped":2`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
}

// TestEmbedResumeRepairsNPY: the same for a .npy output whose ids file names an id the
// input does not hold and repeats another (the array and ids edited together, as a
// botched copy leaves them): the resume drops both rows and ends byte-identical to the
// uninterrupted run, array and ids.
func TestEmbedResumeRepairsNPY(t *testing.T) {
	bin, model := e2e.Paths(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	writeLines(t, in, corpusLines(t, 30))
	args := func(out string) []string {
		return []string{"--model", model, "--input", in, "--output", out, "--threads", "1", "--batch-size", "8"}
	}
	ref := filepath.Join(dir, "ref.npy")
	runEmbedCmd(t, bin, args(ref)...)
	arr, _ := os.ReadFile(ref)
	ids, _ := os.ReadFile(ref + ".ids")
	const header, row = 128, 64 * 4
	idLines := strings.SplitAfter(string(ids), "\n")
	// Rows 1-10, then row 3 again and row 11 under the id 999.
	partialIDs := strings.Join(idLines[:10], "") + idLines[2] + "999\n"
	partial := append([]byte(nil), arr[:header+10*row]...)
	partial = append(partial, arr[header+2*row:header+3*row]...)
	partial = append(partial, arr[header+10*row:header+11*row]...)
	out := filepath.Join(dir, "out.npy")
	os.WriteFile(out, partial, 0o644) // the header still says 30 rows: the size decides
	os.WriteFile(out+".ids", []byte(partialIDs), 0o644)
	log := runEmbedCmd(t, bin, args(out)...)
	gotArr, _ := os.ReadFile(out)
	gotIDs, _ := os.ReadFile(out + ".ids")
	if !bytes.Equal(gotArr, arr) || !bytes.Equal(gotIDs, ids) {
		t.Errorf("resumed .npy (%d bytes, ids %d bytes) differs from the uninterrupted run's (%d, %d)", len(gotArr), len(gotIDs), len(arr), len(ids))
	}
	if want := `msg="repaired the output: dropped rows that repeated an earlier row's id or whose id the input does not hold" output=` + out + ` repeated=1 not_in_input=1 first_dropped_id=3`; !strings.Contains(log, want) {
		t.Errorf("log lacks %s:\n%s", want, log)
	}
}

package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

// JobRecord says what made an output's vectors: the model file and every setting that
// changes a vector. A resume appends to an output and a merge joins parts, and
// vectors of two models (or of queries and documents) side by side are an index
// that answers wrongly without a sign, where only a change of dimension showed
// before. So a job writes its JobRecord beside its output (RecordPath; a Parquet
// output's in its key-value metadata, parquetRecordKey), a resume and a merge
// compare it with theirs and refuse another job's vectors, naming the difference.
type JobRecord struct {
	// Model is the model as the job was given it, for people; it is not compared
	// (the same file may be named otherwise, or moved).
	Model string `json:"model"`
	// ModelSHA256 is the GGUF file's sha256, in hex.
	ModelSHA256 string `json:"model_sha256"`
	// Weights is the type the workers computed with ("F16", "BF16", "Q8_0"): a
	// copy converted at load gives other bits than the file's type.
	Weights string `json:"weights"`
	// Pooling is how a sequence became one vector ("last", "mean", "cls").
	Pooling string `json:"pooling"`
	// InputType is "query" or "document", and Prompt the text before each input:
	// the query prompt with its instruction, or the document prompt.
	InputType string `json:"input_type"`
	Prompt    string `json:"prompt"`
	// Dimensions is the vectors' size.
	Dimensions int `json:"dimensions"`
	// FirstText is the sha256 of the text of the input's first item, whose vector
	// is the output's first row: a resume whose input starts with another text is
	// refused (a mistyped --input of lines, whose ids are line numbers and so
	// match any output's). Not compared by Differences, which is about settings.
	FirstText string `json:"first_text_sha256,omitempty"`
}

// textDigest is FirstText's digest of a text.
func textDigest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// RecordPath is where the JobRecord of a JSONL or .npy output (or a shard's part, or
// a .parquet job's work file) is kept: beside it, as FILE.job.json.
func RecordPath(output string) string { return output + ".job.json" }

// parquetRecordKey is the key of a Parquet output's JobRecord in its file metadata.
const parquetRecordKey = "embed_stack.job"

// Differences names each compared field in which got differs from want, as
// "model_sha256 0f1e2d3c4b5a (this job: 1a2b3c4d5e6f)".
func (want *JobRecord) Differences(got *JobRecord) []string {
	var out []string
	add := func(name, g, w string) {
		if g != w {
			out = append(out, fmt.Sprintf("%s %s (this job: %s)", name, g, w))
		}
	}
	add("model_sha256", short(got.ModelSHA256), short(want.ModelSHA256))
	add("weights", got.Weights, want.Weights)
	add("pooling", got.Pooling, want.Pooling)
	add("input_type", got.InputType, want.InputType)
	add("prompt", strconv.Quote(got.Prompt), strconv.Quote(want.Prompt))
	add("dimensions", strconv.Itoa(got.Dimensions), strconv.Itoa(want.Dimensions))
	return out
}

// short abbreviates a sha256 for messages; its first 12 hex digits tell files apart.
func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	if digest == "" {
		return "unknown"
	}
	return digest
}

// ReadRecord reads the JobRecord kept at path (RecordPath); nil when there is none.
func ReadRecord(path string) (*JobRecord, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r JobRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a job record: %w", path, err)
	}
	return &r, nil
}

// WriteRecord writes r at path, whole or not at all (a temporary file renamed).
func WriteRecord(path string, r *JobRecord) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// readParquetRecord reads the JobRecord in a Parquet file's metadata; nil when it
// holds none (written before records were).
func readParquetRecord(f *parquet.File) (*JobRecord, error) {
	v, ok := f.Lookup(parquetRecordKey)
	if !ok {
		return nil, nil
	}
	var r JobRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return nil, fmt.Errorf("its %s metadata is not a job record: %w", parquetRecordKey, err)
	}
	return &r, nil
}

// partRecord reads the JobRecord of a part (or of an existing .parquet output): a
// Parquet file's metadata, else its RecordPath.
func partRecord(path string) (rec *JobRecord, err error) {
	if FormatFor(path) != FormatParquet {
		return ReadRecord(RecordPath(path))
	}
	err = withParquet(path, func(pf *parquet.File) error {
		rec, err = readParquetRecord(pf)
		return err
	})
	return rec, err
}

// withParquet opens the Parquet file at path for fn, which must not keep it.
func withParquet(path string, fn func(*parquet.File) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	pf, err := parquet.OpenFile(f, fi.Size())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return fn(pf)
}

// anotherJob is the error of a resume or merge that found another job's vectors.
func anotherJob(what string, diffs []string) error {
	msg := what + " holds vectors of another job:"
	for i, d := range diffs {
		if i > 0 {
			msg += ","
		}
		msg += " " + d
	}
	return errors.New(msg)
}

// parquetFields lists a Parquet output's pass-through columns (all but id and
// embedding), sorted.
func parquetFields(path string) (out []string, err error) {
	err = withParquet(path, func(pf *parquet.File) error {
		for _, field := range pf.Schema().Fields() {
			if n := field.Name(); n != "id" && n != "embedding" {
				out = append(out, n)
			}
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// sameFields says whether the columns are the pass-through fields asked for, in
// any order.
func sameFields(columns, asked []string) bool {
	a := slices.Sorted(slices.Values(asked))
	return slices.Equal(columns, a)
}

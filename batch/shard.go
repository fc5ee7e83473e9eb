package batch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Shard names one of Count slices of an input file, Index counting from 0. The zero
// value (Count 0) is the whole input.
//
// Slices are byte ranges: shard i takes the lines that start in
// [i·size/Count, (i+1)·size/Count) of the input file. Every line is in exactly one
// shard, the shards are consecutive runs of lines in input order (so merging is
// concatenation, checked), finding a slice costs two short reads, and a shard's
// item ids and line numbers are the same as a single run's (the lines before the
// slice are counted, a sequential read). The input must not change between the
// shards' runs and the merge.
type Shard struct{ Index, Count int }

// ParseShard reads "i/N" (0 ≤ i < N).
func ParseShard(s string) (Shard, error) {
	var sh Shard
	var rest string
	if n, _ := fmt.Sscanf(s, "%d/%d%s", &sh.Index, &sh.Count, &rest); n != 2 || sh.Count < 1 || sh.Index < 0 || sh.Index >= sh.Count {
		return Shard{}, fmt.Errorf("shard %q: want i/N with 0 ≤ i < N, such as 0/4", s)
	}
	return sh, nil
}

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// ShardPath is where shard s of a job writing path keeps its output: the shard's
// number and the count before the extension, "vectors.npy" → "vectors-00002-of-00008.npy",
// so that a listing sorts the parts in input order.
func ShardPath(path string, s Shard) string {
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s-%05d-of-%05d%s", strings.TrimSuffix(path, ext), s.Index, s.Count, ext)
}

// ShardInput is the slice of an input file that a shard reads.
type ShardInput struct {
	// Start and End are the slice's byte offsets in the file: Start is 0 or just past
	// a newline, End is the next shard's Start (or the file's size).
	Start, End int64
	// FirstLine is the line number of the line at Start, from 1.
	FirstLine int64
}

// OpenShard finds shard s of an input of size bytes read through r.
func OpenShard(r io.ReaderAt, size int64, s Shard) (ShardInput, error) {
	if s.Count == 0 {
		return ShardInput{End: size, FirstLine: 1}, nil
	}
	start, err := lineStart(r, size, int64(s.Index)*size/int64(s.Count))
	if err != nil {
		return ShardInput{}, err
	}
	end, err := lineStart(r, size, int64(s.Index+1)*size/int64(s.Count))
	if err != nil {
		return ShardInput{}, err
	}
	lines, err := countLines(io.NewSectionReader(r, 0, start))
	if err != nil {
		return ShardInput{}, err
	}
	return ShardInput{Start: start, End: end, FirstLine: lines + 1}, nil
}

// Reader returns the slice's bytes.
func (si ShardInput) Reader(r io.ReaderAt) io.Reader {
	return io.NewSectionReader(r, si.Start, si.End-si.Start)
}

// lineStart returns the first offset ≥ pos at which a line starts (or size).
func lineStart(r io.ReaderAt, size, pos int64) (int64, error) {
	if pos <= 0 {
		return 0, nil
	}
	if pos >= size {
		return size, nil
	}
	br := bufio.NewReaderSize(io.NewSectionReader(r, pos-1, size-pos+1), 64<<10)
	for off := pos - 1; ; off++ {
		c, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			return size, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read input: %w", err)
		}
		if c == '\n' {
			return off + 1, nil
		}
	}
}

func countLines(r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read input: %w", err)
		}
	}
}

package batch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The batch job writes, truncates, renames and removes files by name. A name is not a
// file: "s.jsonl" and "./s.jsonl", a symbolic link and a hard link all reach the same
// one, and a job whose output is its own input would wipe the corpus (issue 28). So
// every file a run touches is compared with its input and with the others by identity
// (device and inode, os.SameFile) when it exists, and by its resolved absolute path
// when it does not yet, before anything is opened for writing.

// fileRef is one file a run reads or writes, for the identity check.
type fileRef struct {
	// role names the file in messages ("the output", "shard 1's part").
	role, path string
	// fi is the file's information when it exists (symbolic links followed).
	fi fs.FileInfo
	// resolved is the absolute path with every symbolic link resolved, as far as
	// the links exist ("" when it cannot be resolved).
	resolved string
}

func refOf(role, path string) (fileRef, error) {
	r := fileRef{role: role, path: path}
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		r.fi = fi
	case errors.Is(err, fs.ErrNotExist):
	default:
		return r, fmt.Errorf("%s %s: %w", role, path, err)
	}
	r.resolved = resolvePath(path)
	return r, nil
}

// resolvePath returns path made absolute with its symbolic links resolved, also
// those of a last element that is a dangling link (a link to a file a run is about
// to create), up to 40 links as the kernel allows.
func resolvePath(path string) string {
	p, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	for range 40 {
		dir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return p
		}
		p = filepath.Join(dir, filepath.Base(p))
		target, err := os.Readlink(p)
		if err != nil {
			return p // not a link (or not there): resolved
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		p = filepath.Clean(target)
	}
	return p
}

// same says whether two refs reach one file.
func (a fileRef) same(b fileRef) bool {
	if a.fi != nil && b.fi != nil {
		return os.SameFile(a.fi, b.fi)
	}
	return a.resolved != "" && a.resolved == b.resolved
}

// describe is how a message names the file: its role and the path as given.
func (a fileRef) describe() string { return fmt.Sprintf("%s (%s)", a.role, a.path) }

// checkDistinct refuses when the input (nil when there is none) is one of files, or
// two of files are one file. A character device as input (a terminal, /dev/null) is
// no file a run could destroy, and may well be its output too.
func checkDistinct(input fs.FileInfo, inputName string, files []fileRef) error {
	if input != nil && input.Mode()&fs.ModeCharDevice != 0 {
		input = nil
	}
	for i, f := range files {
		if input != nil && f.fi != nil && os.SameFile(input, f.fi) {
			return fmt.Errorf("the input (%s) and %s are the same file: the run would overwrite its own input; choose another --output", inputName, f.describe())
		}
		for _, g := range files[:i] {
			if f.same(g) {
				return fmt.Errorf("%s and %s are the same file: the run would write one over the other; choose another --output", g.describe(), f.describe())
			}
		}
	}
	return nil
}

// outputFiles lists the files a job writing path in format touches: the output, the
// ids sidecar of a .npy, and the temporary copies and commit marker of a repair.
func outputFiles(path string, format Format) []string {
	files := []string{path, repairPath(path)}
	if format == FormatNPY {
		files = append(files, IDsPath(path), repairPath(IDsPath(path)), commitPath(path))
	}
	return files
}

func refsOf(role, path string, format Format) ([]fileRef, error) {
	var refs []fileRef
	for i, p := range outputFiles(path, format) {
		r := role
		if i > 0 {
			r = role + "'s work file"
		}
		ref, err := refOf(r, p)
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// CheckFiles refuses, before anything is written, a run of `embed` that would destroy
// a file it did not write. input is the opened input's information (nil for none),
// inputName names it in messages, output is --output as given (before a shard's
// suffix). It refuses when the input is one of the files the run writes or removes,
// when two of those are one file (the output, its work files, and in a sharded run
// the other shards' parts), when a .parquet output exists but is not a regular file,
// and, unless overwrite, when an existing .parquet output is not one this package
// wrote (the run would replace it).
func CheckFiles(input fs.FileInfo, inputName, output string, shard Shard, overwrite bool) error {
	if output == "-" {
		return nil
	}
	own := output
	if shard.Count > 0 {
		own = ShardPath(output, shard)
	}
	work := WorkPath(own)
	files, err := refsOf("the output", work, FormatFor(work))
	if err != nil {
		return err
	}
	if work != own && shard.Count == 0 {
		// A .parquet output: written through a temporary copy once the vectors are
		// in, and renamed over the output.
		for _, p := range []string{own, own + ".merging"} {
			ref, err := refOf("the output", p)
			if err != nil {
				return err
			}
			if ref.fi != nil && !ref.fi.Mode().IsRegular() {
				return fmt.Errorf("--output %s is not a regular file (%s): a .parquet output is written to a temporary file renamed into place; give a file name", p, ref.fi.Mode().Type())
			}
			files = append(files, ref)
		}
	}
	for i := range shard.Count {
		if i == shard.Index {
			continue
		}
		ref, err := refOf(fmt.Sprintf("shard %d's part", i), WorkPath(ShardPath(output, Shard{Index: i, Count: shard.Count})))
		if err != nil {
			return err
		}
		files = append(files, ref)
	}
	if err := checkDistinct(input, inputName, files); err != nil {
		return err
	}
	if work != own && shard.Count == 0 && !overwrite {
		if _, err := os.Stat(own); err == nil {
			if err := isOurOutput(own, FormatParquet); err != nil {
				return fmt.Errorf("--output %s exists and is not an output of embed-stack (%v): the run would replace it; pass --overwrite to replace it, or choose another --output", own, err)
			}
		}
	}
	return nil
}

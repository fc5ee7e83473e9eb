package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/embed-stack/embed-stack/internal/filelock"
)

// repoCache is one repository's folder in the Hugging Face cache:
//
//	{cache}/models--{owner}--{name}/
//	  blobs/{etag}                  file contents, named by ETag (sha256 for LFS files)
//	  snapshots/{commit}/{file}     relative symlink to ../../blobs/{etag}
//	  refs/{revision}               the commit a branch or tag pointed to, no newline
//
// and its locks under {cache}/.locks/models--{owner}--{name}/{etag}.lock.
type repoCache struct {
	cacheDir string
	folder   string // "models--{owner}--{name}"
}

func newRepoCache(cacheDir string, r repoRef) repoCache {
	return repoCache{cacheDir: cacheDir, folder: "models--" + r.Owner + "--" + r.Name}
}

func (c repoCache) root() string { return filepath.Join(c.cacheDir, c.folder) }

func (c repoCache) blobPath(etag string) string {
	return filepath.Join(c.root(), "blobs", etag)
}

func (c repoCache) pointerPath(commit, file string) string {
	return filepath.Join(c.root(), "snapshots", commit, filepath.FromSlash(file))
}

func (c repoCache) refPath(rev string) string {
	return filepath.Join(c.root(), "refs", filepath.FromSlash(rev))
}

func (c repoCache) lockPath(etag string) string {
	return filepath.Join(c.cacheDir, ".locks", c.folder, etag+".lock")
}

// safeETag admits the ETags the Hub sends (a sha256 or git sha1 in hex, occasionally
// other opaque tokens) as long as they are a plain file name: a blob is named by it.
var safeETag = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+=-]{0,199}$`)

// commitFor returns the commit a revision names in the cache: the revision itself when
// it is a commit hash, else the content of refs/{revision}. ok is false when the cache
// has never resolved that revision.
func (c repoCache) commitFor(rev string) (commit string, ok bool, err error) {
	if commitRE.MatchString(rev) {
		return rev, true, nil
	}
	b, err := os.ReadFile(c.refPath(rev))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read cached revision: %w", err)
	}
	commit = strings.TrimSpace(string(b))
	if !commitRE.MatchString(commit) {
		return "", false, fmt.Errorf("cached revision %s holds %q, not a commit hash", c.refPath(rev), commit)
	}
	return commit, true, nil
}

// writeRef records that rev points at commit. It writes a temporary file and renames
// it, so a concurrent reader sees the old or the new commit, never a torn one.
func (c repoCache) writeRef(rev, commit string) error {
	if rev == commit {
		return nil // huggingface_hub writes no ref for a commit hash either
	}
	p := c.refPath(rev)
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("create refs folder: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".ref-*.tmp")
	if err != nil {
		return fmt.Errorf("write ref: %w", err)
	}
	_, werr := tmp.WriteString(commit)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write ref %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write ref %s: %w", p, err)
	}
	return nil
}

// linkPointer makes snapshots/{commit}/{file} a relative symlink to the blob, so the
// cache can be moved as a whole. Where symlinks are not allowed it falls back to a hard
// link (the same bytes, no second copy). The link appears atomically by rename.
func (c repoCache) linkPointer(blob, pointer string) error {
	dir := filepath.Dir(pointer)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create snapshot folder: %w", err)
	}
	rel, err := filepath.Rel(dir, blob)
	if err != nil {
		return fmt.Errorf("link %s: %w", pointer, err)
	}
	tmp := filepath.Join(dir, "."+filepath.Base(pointer)+".link-tmp")
	os.Remove(tmp) // a leftover of an interrupted run; we hold the blob's lock
	if serr := os.Symlink(rel, tmp); serr != nil {
		if lerr := os.Link(blob, tmp); lerr != nil {
			return fmt.Errorf("link %s to %s: %w", pointer, blob, errors.Join(serr, lerr))
		}
	}
	if err := os.Rename(tmp, pointer); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link %s: %w", pointer, err)
	}
	return nil
}

// cachedGGUFs lists the complete .gguf files of a cached snapshot (slash-separated,
// relative to it). A pointer whose blob is missing is not complete and is left out.
func (c repoCache) cachedGGUFs(commit string) ([]string, error) {
	root := filepath.Join(c.root(), "snapshots", commit)
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() || !isGGUF(d.Name()) {
			return nil
		}
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list cached snapshot %s: %w", root, err)
	}
	return ggufFiles(files), nil
}

// lockBlob takes the per-blob lock huggingface_hub also takes, creating its folder.
func (c repoCache) lockBlob(ctx context.Context, etag string, onWait func()) (unlock func(), err error) {
	p := c.lockPath(etag)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("create lock folder: %w", err)
	}
	return filelock.Lock(ctx, p, onWait)
}

// isRegularFile reports whether p (following symlinks) is a regular file.
func isRegularFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// cleanFile reports whether a repository file path from the Hub is safe to join under
// snapshots/{commit}: relative, no "..", no backslashes.
func cleanFile(f string) bool {
	if f == "" || strings.ContainsAny(f, "\\\x00") || path.IsAbs(f) {
		return false
	}
	for _, seg := range strings.Split(f, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

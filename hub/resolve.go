package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Resolve returns the local path of the GGUF model ref names: ref itself when it is an
// existing file, else the cached (and, unless offline, downloaded) file of a Hugging Face
// reference, as the package documentation describes. The path of a Hub file is its
// snapshot path, snapshots/{commit}/{file}, a symlink into blobs/.
//
// Online, each call asks the Hub which commit the revision points at (one small API
// request) and downloads nothing when that commit's file is cached. When the Hub cannot
// be reached, a file cached for the revision is used with a warning, as huggingface_hub
// does. Resolve is safe for concurrent use, also by several processes on one cache.
func Resolve(ctx context.Context, ref string, opts Options) (string, error) {
	if strings.TrimSpace(ref) == "" {
		return "", errors.New("no model given: pass a local .gguf path or a Hugging Face reference such as Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0")
	}
	fi, err := os.Stat(ref)
	switch {
	case err == nil && fi.IsDir():
		return "", fmt.Errorf("model %s is a directory; pass the .gguf file inside it or a Hugging Face reference such as Qwen/Qwen3-Embedding-0.6B-GGUF", ref)
	case err == nil:
		return ref, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("model %s: %w", ref, err)
	case looksLocal(ref):
		return "", fmt.Errorf("model file %s does not exist (a Hugging Face reference looks like %s): %w", ref, refSyntax, err)
	}
	r, perr := parseRef(ref)
	if perr != nil {
		return "", fmt.Errorf("model %q is neither an existing file nor a valid Hugging Face reference: %w", ref, perr)
	}
	c, err := newClient(opts)
	if err != nil {
		return "", err
	}
	return c.resolve(ctx, r)
}

// looksLocal tells a mistyped path from a Hub reference so that it gets a "no such file"
// error instead of a network request: absolute and ./ paths, anything with no '/' (a
// reference needs owner/name), and owner/name.gguf, which names a file, not a repository.
func looksLocal(ref string) bool {
	if filepath.IsAbs(ref) || strings.HasPrefix(ref, ".") || strings.HasPrefix(ref, "~") ||
		strings.ContainsRune(ref, '\\') || !strings.Contains(ref, "/") {
		return true
	}
	parts := strings.Split(ref, "/")
	return len(parts) == 2 && isGGUF(parts[1])
}

func (c *client) resolve(ctx context.Context, r repoRef) (string, error) {
	cache := newRepoCache(c.cacheDir, r)
	if c.offline {
		return c.resolveCached(cache, r, "offline mode is on (HF_HUB_OFFLINE=1)", nil)
	}
	p, transferring, err := c.resolveOnline(ctx, cache, r)
	// Fall back to the cache only when the Hub could not say which commit is current;
	// after a transfer has begun, an older cached commit would silently replace the
	// model just announced.
	if err != nil && errors.Is(err, ErrNetwork) && !transferring {
		if cached, cerr := c.resolveCached(cache, r, "", err); cerr == nil {
			c.log.Warn("hub unreachable; using the cached model", "repo", r.repoID(), "revision", r.revision(), "path", cached, "error", err.Error())
			return cached, nil
		}
	}
	return p, err
}

// resolveOnline asks the Hub and downloads what the cache lacks. transferring reports
// that the failure, if any, happened after the download began.
func (c *client) resolveOnline(ctx context.Context, cache repoCache, r repoRef) (path string, transferring bool, err error) {
	info, err := c.fetchRepoInfo(ctx, r)
	if err != nil {
		return "", false, err
	}
	file, err := selectFile(r, ggufFiles(info.files()))
	if err != nil {
		return "", false, err
	}
	if !cleanFile(file) {
		return "", false, &Error{Kind: ErrHub, Msg: fmt.Sprintf("the hub lists an unsafe file name %q in %s", file, r.repoID())}
	}
	rev := r.revision()
	pointer := cache.pointerPath(info.SHA, file)
	if isRegularFile(pointer) {
		if err := cache.writeRef(rev, info.SHA); err != nil {
			return "", false, cacheError(err)
		}
		return pointer, false, nil
	}

	// Ask for the file at the commit just listed, not at the branch, so the file list and
	// the bytes belong to the same commit even if the branch moves in between.
	meta, err := c.fetchFileMeta(ctx, r, info.SHA, file)
	if err != nil {
		return "", false, err
	}
	blob := cache.blobPath(meta.ETag)
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return "", false, cacheError(err)
	}
	unlock, err := cache.lockBlob(ctx, meta.ETag, func() {
		c.log.Info("waiting for another download of the same file to finish", "repo", r.repoID(), "file", file)
	})
	if err != nil {
		return "", false, cacheError(err)
	}
	defer unlock()

	if !isRegularFile(blob) {
		expect := ""
		if sha256ETag.MatchString(meta.ETag) {
			expect = meta.ETag
		}
		start := c.clockNow()
		err := c.download(ctx, blobDownload{
			url: c.resolveURL(r, meta.Commit, file), dest: blob, size: meta.Size, sha256: expect,
			name: file, ref: r, file: file,
		})
		if err != nil {
			return "", true, err
		}
		secs := c.clockNow().Sub(start).Seconds()
		rate := 0.0
		if secs > 0 && meta.Size > 0 {
			rate = round1(float64(meta.Size) / secs / 1e6)
		}
		c.log.Info("model downloaded", "repo", r.repoID(), "file", file, "commit", meta.Commit,
			"size_mb", mb(meta.Size), "seconds", round1(secs), "mb_per_s", rate, "path", blob)
	}
	pointer = cache.pointerPath(meta.Commit, file)
	if err := cache.linkPointer(blob, pointer); err != nil {
		return "", false, cacheError(err)
	}
	if err := cache.writeRef(rev, meta.Commit); err != nil {
		return "", false, cacheError(err)
	}
	return pointer, false, nil
}

func cacheError(err error) error {
	return &Error{Kind: ErrCache, Msg: fmt.Sprintf("cannot update the Hugging Face cache: %v; check the folder's permissions or set HF_HUB_CACHE", err), Err: err}
}

// resolveCached finds the file in the cache alone. why says why the network is not used
// (offline mode), or hubErr is the failure that made Resolve fall back here; either goes
// into the ErrNotCached message.
func (c *client) resolveCached(cache repoCache, r repoRef, why string, hubErr error) (string, error) {
	rev := r.revision()
	notCached := func(detail string, cause error) error {
		msg := fmt.Sprintf("%s (revision %s) is not in the Hugging Face cache at %s", r.repoID(), rev, c.cacheDir)
		if detail != "" {
			msg += ": " + detail
		}
		if why != "" {
			msg += "; " + why + ": unset HF_HUB_OFFLINE and run once with network access to download it, or pass the path of a local .gguf file"
		}
		return &Error{Kind: ErrNotCached, Msg: msg, Err: errors.Join(cause, hubErr)}
	}
	commit, ok, err := cache.commitFor(rev)
	if err != nil {
		return "", notCached(err.Error(), err)
	}
	if !ok {
		return "", notCached("", nil)
	}
	files, err := cache.cachedGGUFs(commit)
	if err != nil {
		return "", notCached(err.Error(), err)
	}
	if len(files) == 0 {
		return "", notCached(fmt.Sprintf("no .gguf file of commit %s is cached", commit), nil)
	}
	file, err := selectFile(r, files)
	if err != nil {
		var serr *Error
		if errors.As(err, &serr) && serr.Kind == ErrAmbiguous {
			return "", &Error{Kind: ErrAmbiguous, Msg: serr.Msg + " (from the files in the cache)"}
		}
		return "", notCached("cached .gguf files of commit "+commit+": "+listFiles(files), nil)
	}
	return cache.pointerPath(commit, file), nil
}

package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const (
	// maxAttempts bounds the connections one download opens. A dropped connection that
	// delivered bytes is reopened at once with a Range request; one that delivered
	// nothing ends the download, since retrying a dead link in a tight loop helps nobody
	// (a rerun resumes from the partial file).
	maxAttempts = 8
	copyBuffer  = 256 << 10
)

// sha256ETag recognises an LFS ETag, the sha256 of the file, which the download is
// checked against. Other ETags (git blob ids of small files) are not checked.
var sha256ETag = regexp.MustCompile(`^[0-9a-f]{64}$`)

// errStalled cancels an attempt that received nothing for the stall timeout.
var errStalled = errors.New("no data received")

// blobDownload is one file to fetch into the cache.
type blobDownload struct {
	url    string // the resolve URL; the Hub redirects it to the CDN
	dest   string // blobs/{etag}
	size   int64  // -1 when unknown
	sha256 string // expected hex digest, "" when not an LFS file
	name   string // shown in progress and errors
	ref    repoRef
	file   string
}

// partial is the .incomplete file being appended to, and the hash of what it holds.
type partial struct {
	f       *os.File
	h       hash.Hash
	size    int64 // bytes in the file
	written int64 // bytes written by this run, never reset: tells progress from a dead link
}

// openPartial opens (or creates) the .incomplete file and hashes what an earlier run
// left in it, so the final digest covers the whole file.
func openPartial(path string) (*partial, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read partial download %s: %w", path, err)
	}
	return &partial{f: f, h: h, size: n}, nil
}

func (p *partial) truncate() error {
	if err := p.f.Truncate(0); err != nil {
		return err
	}
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	p.h.Reset()
	p.size = 0
	return nil
}

func (p *partial) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	p.h.Write(b[:n])
	p.size += int64(n)
	p.written += int64(n)
	return n, err
}

// download fetches d into d.dest through d.dest+".incomplete", resuming what a previous
// run left there, and renames it into place only once size and sha256 are right. The
// caller holds the blob's lock.
func (c *client) download(ctx context.Context, d blobDownload) error {
	incomplete := d.dest + ".incomplete"
	part, err := openPartial(incomplete)
	if err != nil {
		return &Error{Kind: ErrCache, Msg: fmt.Sprintf("cannot write to the cache: %v", err), Err: err}
	}
	defer func() {
		if part.f != nil {
			part.f.Close()
		}
	}()
	if d.size >= 0 && part.size > d.size {
		// Longer than the file: not a prefix of it, so useless.
		if err := part.truncate(); err != nil {
			return &Error{Kind: ErrCache, Msg: fmt.Sprintf("cannot reset %s: %v", incomplete, err), Err: err}
		}
	}
	prog := newProgress(c, d.name, d.size)
	prog.begin(part.size)
	defer prog.end()

loop:
	for attempt := 1; d.size < 0 || part.size < d.size; attempt++ {
		if attempt > maxAttempts {
			return c.downloadError(ctx, d, part.size, incomplete, fmt.Errorf("gave up after %d connections", maxAttempts))
		}
		before := part.written
		done, err := c.fetchAttempt(ctx, d, part, prog)
		var herr *Error
		switch {
		case err == nil && done:
			break loop
		case err == nil:
			// Started over from byte 0; go again.
		case errors.As(err, &herr) || ctx.Err() != nil || part.written == before:
			return c.downloadError(ctx, d, part.size, incomplete, err)
		default:
			c.log.Warn("download interrupted; resuming", "file", d.name, "at_mb", mb(part.size), "error", err.Error())
		}
	}

	if d.size >= 0 && part.size != d.size {
		return &Error{Kind: ErrNetwork, Msg: fmt.Sprintf("download of %s ended at %d of %d bytes; run again to resume%s", d.name, part.size, d.size, offlineAdvice)}
	}
	if d.sha256 != "" {
		if got := hex.EncodeToString(part.h.Sum(nil)); got != d.sha256 {
			part.f.Close()
			part.f = nil
			os.Remove(incomplete)
			return &Error{Kind: ErrChecksum, Msg: fmt.Sprintf("downloaded %s has sha256 %s but the hub says %s; the corrupt download was deleted, run again to retry (if it repeats, a proxy may be altering the file)", d.name, got, d.sha256)}
		}
	}
	cerr := part.f.Close()
	part.f = nil
	if cerr != nil {
		return &Error{Kind: ErrCache, Msg: fmt.Sprintf("cannot write %s: %v", incomplete, cerr), Err: cerr}
	}
	if err := os.Rename(incomplete, d.dest); err != nil {
		return &Error{Kind: ErrCache, Msg: fmt.Sprintf("cannot move %s into place: %v", incomplete, err), Err: err}
	}
	return nil
}

// fetchAttempt runs one GET from part.size on. It returns done when the body ended
// normally, (false, nil) when it started over from byte 0 (the server ignored Range, or
// refused it with 416), and a plain error for a broken connection, which the caller may
// resume, or an *Error for an answer it must not retry.
func (c *client) fetchAttempt(ctx context.Context, d blobDownload, part *partial, prog *progress) (bool, error) {
	// The stall timer covers the whole attempt: waiting for the redirect, the headers
	// and every read. Each read that returns bytes pushes it back.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(c.stall, func() { cancel(fmt.Errorf("%w for %s", errStalled, c.stall)) })
	defer stall.Stop()

	req, err := c.newRequest(actx, http.MethodGet, d.url)
	if err != nil {
		return false, err
	}
	offset := part.size
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false, attemptError(actx, err)
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode == http.StatusOK && offset > 0:
		// The server ignored Range and sends the whole file: start over.
		c.log.Warn("server ignored the resume request; downloading from the start", "file", d.name)
		if err := part.truncate(); err != nil {
			return false, &Error{Kind: ErrCache, Msg: fmt.Sprintf("cannot reset %s.incomplete: %v", d.dest, err), Err: err}
		}
		prog.restart()
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusPartialContent && offset > 0:
		start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != offset || (d.size >= 0 && total >= 0 && total != d.size) {
			return false, &Error{Kind: ErrHub, Msg: fmt.Sprintf("the server answered a resume from byte %d of %s with Content-Range %q; delete %s.incomplete and run again",
				offset, d.name, resp.Header.Get("Content-Range"), d.dest)}
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		// The partial file is no prefix the server recognises: start over.
		if err := part.truncate(); err != nil {
			return false, &Error{Kind: ErrCache, Msg: fmt.Sprintf("cannot reset %s.incomplete: %v", d.dest, err), Err: err}
		}
		prog.restart()
		return false, nil
	default:
		return false, c.downloadStatusError(resp, d)
	}
	if resp.StatusCode == http.StatusOK && d.size >= 0 && resp.ContentLength >= 0 && resp.ContentLength != d.size {
		return false, &Error{Kind: ErrHub, Msg: fmt.Sprintf("the server sends %d bytes for %s but the hub announced %d", resp.ContentLength, d.name, d.size)}
	}

	buf := make([]byte, copyBuffer)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			stall.Reset(c.stall)
			if _, werr := part.Write(buf[:n]); werr != nil {
				return false, &Error{Kind: ErrCache, Msg: fmt.Sprintf("cannot write %s.incomplete: %v", d.dest, werr), Err: werr}
			}
			prog.add(n)
			if d.size >= 0 && part.size > d.size {
				return false, &Error{Kind: ErrHub, Msg: fmt.Sprintf("the server sent more than the %d bytes the hub announced for %s", d.size, d.name)}
			}
		}
		if rerr == io.EOF {
			return true, nil
		}
		if rerr != nil {
			return false, attemptError(actx, rerr)
		}
	}
}

// attemptError names a stall as such rather than as "context canceled".
func attemptError(actx context.Context, err error) error {
	if cause := context.Cause(actx); cause != nil && errors.Is(cause, errStalled) {
		return cause
	}
	return err
}

// parseContentRange reads "bytes START-END/TOTAL" (TOTAL may be "*", returned as -1).
func parseContentRange(v string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	s, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, total, true
}

// downloadError wraps the failure that ended a download, saying how far it got and
// that a rerun resumes from there.
func (c *client) downloadError(ctx context.Context, d blobDownload, got int64, incomplete string, err error) error {
	var herr *Error
	if errors.As(err, &herr) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("download of %s stopped at %d bytes (kept in %s): %w", d.name, got, incomplete, context.Cause(ctx))
	}
	of := ""
	if d.size >= 0 {
		of = fmt.Sprintf(" of %d", d.size)
	}
	return &Error{Kind: ErrNetwork, Msg: fmt.Sprintf("download of %s failed at %d%s bytes: %v; run again to resume from there (the partial file is %s)%s",
		d.name, got, of, err, incomplete, offlineAdvice), Err: err}
}

// downloadStatusError explains an error status on the download itself: from the Hub it
// means what it means for any Hub request; from the CDN it is about the signed link or
// the CDN, never about the token, which the CDN does not see.
func (c *client) downloadStatusError(resp *http.Response, d blobDownload) error {
	if c.isHubHost(resp.Request.URL) {
		return c.statusError(resp, d.ref, d.file)
	}
	status := fmt.Sprintf("HTTP %d from %s", resp.StatusCode, resp.Request.URL.Host)
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return &Error{Kind: ErrNetwork, Msg: fmt.Sprintf("the download server failed to serve %s (%s); run again later to resume%s", d.name, status, offlineAdvice)}
	}
	return &Error{Kind: ErrHub, Msg: fmt.Sprintf("the download server refused %s (%s); its signed link may have expired, run again to get a fresh one", d.name, status)}
}

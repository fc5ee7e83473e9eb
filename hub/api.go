package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// userAgent identifies this client to the Hub, as huggingface_hub's does.
const userAgent = "embed-stack-hub/1"

// maxAPIBody bounds the repository listing read into memory; a repository with
// thousands of files lists in well under a megabyte.
const maxAPIBody = 16 << 20

// client is one Resolve call's view of the Options, with defaults filled in.
type client struct {
	endpoint *url.URL
	token    string
	cacheDir string
	offline  bool
	http     *http.Client // follows redirects, dropping the token off the Hub's host
	head     *http.Client // follows no redirects: metadata is on the first response
	stall    time.Duration
	log      *slog.Logger
	progress io.Writer
	terminal bool
	clockNow func() time.Time
}

func newClient(opts Options) (*client, error) {
	ep := opts.Endpoint
	if ep == "" {
		ep = DefaultEndpoint
	}
	u, err := url.Parse(strings.TrimRight(ep, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &Error{Kind: ErrHub, Msg: fmt.Sprintf("invalid hub endpoint %q (HF_ENDPOINT): expected a URL such as %s", ep, DefaultEndpoint), Err: err}
	}
	cacheDir, err := opts.Dir()
	if err != nil {
		return nil, err
	}
	c := &client{
		endpoint: u,
		token:    opts.Token,
		cacheDir: cacheDir,
		offline:  opts.Offline,
		stall:    opts.StallTimeout,
		log:      opts.Logger,
		progress: opts.Progress,
		terminal: opts.IsTerminal,
		clockNow: time.Now,
	}
	if c.stall <= 0 {
		c.stall = defaultStallTimeout
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	base := opts.HTTPClient
	if base == nil {
		base = defaultHTTPClient()
	}
	follow := *base
	follow.CheckRedirect = c.checkRedirect
	head := *base
	head.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.http, c.head = &follow, &head
	return c, nil
}

// defaultHTTPClient has no overall timeout (a download takes as long as it takes; the
// stall timer catches a dead connection) but bounds connecting and waiting for headers.
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 60 * time.Second
	return &http.Client{Transport: t}
}

// checkRedirect bounds the chain and removes the token from a request leaving the
// Hub's host: the CDN URLs the Hub redirects to are pre-signed, and a bearer token must
// not travel to a host it was not meant for. net/http already drops it across hosts;
// this keeps that true whatever a custom client does.
func (c *client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if !c.isHubHost(req.URL) {
		req.Header.Del("Authorization")
	}
	return nil
}

func (c *client) isHubHost(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, c.endpoint.Scheme) && strings.EqualFold(u.Host, c.endpoint.Host)
}

func (c *client) newRequest(ctx context.Context, method, rawURL string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, nil)
	if err != nil {
		return nil, &Error{Kind: ErrHub, Msg: fmt.Sprintf("build request for %s: %v", rawURL, err), Err: err}
	}
	req.Header.Set("User-Agent", userAgent)
	// identity: sizes and Range offsets must count the stored bytes, not a gzip stream.
	req.Header.Set("Accept-Encoding", "identity")
	if c.token != "" && c.isHubHost(req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// apiURL is {endpoint}/api/models/{repo}/revision/{rev}, the revision escaped whole
// (refs/pr/1 → refs%2Fpr%2F1) as huggingface_hub does.
func (c *client) apiURL(r repoRef, rev string) string {
	return c.endpoint.String() + "/api/models/" + r.Owner + "/" + r.Name + "/revision/" + url.PathEscape(rev)
}

// resolveURL is {endpoint}/{repo}/resolve/{rev}/{file}.
func (c *client) resolveURL(r repoRef, rev, file string) string {
	segs := strings.Split(file, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.endpoint.String() + "/" + r.Owner + "/" + r.Name + "/resolve/" + url.PathEscape(rev) + "/" + strings.Join(segs, "/")
}

// repoInfo is the part of the Hub's model API answer this package uses.
type repoInfo struct {
	SHA      string `json:"sha"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

func (i repoInfo) files() []string {
	out := make([]string, 0, len(i.Siblings))
	for _, s := range i.Siblings {
		out = append(out, s.RFilename)
	}
	return out
}

// fetchRepoInfo lists a repository's files at a revision and the commit it resolves to.
func (c *client) fetchRepoInfo(ctx context.Context, r repoRef) (repoInfo, error) {
	u := c.apiURL(r, r.revision())
	req, err := c.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return repoInfo{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return repoInfo{}, c.networkError(ctx, fmt.Sprintf("list the files of %s", r.repoID()), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return repoInfo{}, c.statusError(resp, r, "")
	}
	var info repoInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAPIBody)).Decode(&info); err != nil {
		return repoInfo{}, c.networkOrHub(ctx, fmt.Sprintf("read the file list of %s from %s", r.repoID(), u), err)
	}
	if !commitRE.MatchString(info.SHA) {
		return repoInfo{}, &Error{Kind: ErrHub, Msg: fmt.Sprintf("the hub's answer for %s has no commit hash (sha %q); is %s a Hugging Face hub (HF_ENDPOINT)?", r.repoID(), info.SHA, c.endpoint)}
	}
	return info, nil
}

// fileMeta is what the first response to HEAD on a resolve URL says about a file.
type fileMeta struct {
	Commit string
	ETag   string // normalised: no W/ prefix, no quotes
	Size   int64  // -1 when not announced
}

// fetchFileMeta sends HEAD to the resolve URL and reads X-Repo-Commit, X-Linked-Etag
// (else ETag) and X-Linked-Size (else Content-Length) from the first response, which for
// an LFS file is the 302 to the CDN: the CDN's own headers describe its storage, not the
// repository. Relative redirects (a renamed repository) are followed, as huggingface_hub
// does, since they stay on the Hub.
func (c *client) fetchFileMeta(ctx context.Context, r repoRef, rev, file string) (fileMeta, error) {
	u := c.resolveURL(r, rev, file)
	for hop := 0; ; hop++ {
		req, err := c.newRequest(ctx, http.MethodHead, u)
		if err != nil {
			return fileMeta{}, err
		}
		resp, err := c.head.Do(req)
		if err != nil {
			return fileMeta{}, c.networkError(ctx, fmt.Sprintf("get the metadata of %s", file), err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			loc, err := url.Parse(resp.Header.Get("Location"))
			if err == nil && loc.String() != "" && loc.Host == "" && hop < maxRedirects {
				u = resp.Request.URL.ResolveReference(loc).String()
				continue
			}
		} else if resp.StatusCode != http.StatusOK {
			return fileMeta{}, c.statusError(resp, r, file)
		}
		return c.parseFileMeta(resp, r, file)
	}
}

func (c *client) parseFileMeta(resp *http.Response, r repoRef, file string) (fileMeta, error) {
	m := fileMeta{
		Commit: resp.Header.Get("X-Repo-Commit"),
		ETag:   normaliseETag(firstNonEmpty(resp.Header.Get("X-Linked-Etag"), resp.Header.Get("ETag"))),
		Size:   -1,
	}
	if s := firstNonEmpty(resp.Header.Get("X-Linked-Size"), resp.Header.Get("Content-Length")); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return fileMeta{}, &Error{Kind: ErrHub, Msg: fmt.Sprintf("the hub announced an invalid size %q for %s in %s", s, file, r.repoID())}
		}
		m.Size = n
	}
	if !commitRE.MatchString(m.Commit) {
		return fileMeta{}, &Error{Kind: ErrHub, Msg: fmt.Sprintf("the hub's answer for %s in %s has no valid X-Repo-Commit header (%q); is %s a Hugging Face hub (HF_ENDPOINT)?", file, r.repoID(), m.Commit, c.endpoint)}
	}
	if !safeETag.MatchString(m.ETag) {
		return fileMeta{}, &Error{Kind: ErrHub, Msg: fmt.Sprintf("the hub's answer for %s in %s has no usable ETag (%q); is %s a Hugging Face hub (HF_ENDPOINT)?", file, r.repoID(), m.ETag, c.endpoint)}
	}
	return m, nil
}

// normaliseETag strips the weak-validator prefix and the quotes: W/"abc" → abc.
func normaliseETag(e string) string {
	e = strings.TrimSpace(e)
	e = strings.TrimPrefix(e, "W/")
	return strings.Trim(e, `"`)
}

// statusError turns a Hub error answer into an actionable *Error. The Hub names the
// failure in X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo),
// which matters because it answers 401, not 404, for a repository that does not exist
// when the request is anonymous (so as not to reveal private repositories).
func (c *client) statusError(resp *http.Response, r repoRef, file string) error {
	code := resp.Header.Get("X-Error-Code")
	detail := hubMessage(resp)
	status := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if detail != "" {
		status += ": " + detail
	}
	repo, rev := r.repoID(), r.revision()
	tokenAdvice := "set HF_TOKEN to a Hugging Face access token with read access"
	if c.token != "" {
		tokenAdvice = "the token sent (HF_TOKEN) was refused or lacks access to it; check it is valid and has read access"
	}
	switch {
	case code == "GatedRepo":
		return &Error{Kind: ErrUnauthorized, Msg: fmt.Sprintf("%s is a gated repository (%s): accept its conditions at %s/%s while logged in, then %s",
			repo, status, c.endpoint, repo, strings.Replace(tokenAdvice, "with read access", "of that account", 1))}
	case code == "RevisionNotFound":
		return &Error{Kind: ErrNotFound, Msg: fmt.Sprintf("revision %q not found in %s (%s); use an existing branch, tag or commit (the default is %s)", rev, repo, status, defaultRevision)}
	case code == "EntryNotFound" || (resp.StatusCode == http.StatusNotFound && file != "" && code != "RepoNotFound"):
		return &Error{Kind: ErrNotFound, Msg: fmt.Sprintf("file %q not found in %s at revision %s (%s)", file, repo, rev, status)}
	case code == "RepoNotFound" || resp.StatusCode == http.StatusNotFound:
		msg := fmt.Sprintf("repository %s not found at %s (%s); check the spelling (e.g. Qwen/Qwen3-Embedding-0.6B-GGUF)", repo, c.endpoint, status)
		if c.token == "" {
			msg += "; if it is private, set HF_TOKEN to a token with access"
		} else {
			msg += "; if it is private, check that the token in HF_TOKEN has access to it"
		}
		return &Error{Kind: ErrNotFound, Msg: msg}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return &Error{Kind: ErrUnauthorized, Msg: fmt.Sprintf("the hub refused access to %s (%s): %s", repo, status, tokenAdvice)}
	case resp.StatusCode == http.StatusTooManyRequests:
		msg := fmt.Sprintf("the hub is rate-limiting requests for %s (%s); wait a minute and retry", repo, status)
		if c.token == "" {
			msg += ", or set HF_TOKEN (authenticated requests get higher limits)"
		}
		return &Error{Kind: ErrNetwork, Msg: msg + offlineAdvice}
	case resp.StatusCode >= 500:
		return &Error{Kind: ErrNetwork, Msg: fmt.Sprintf("the hub failed to serve %s (%s); retry later%s", repo, status, offlineAdvice)}
	}
	return &Error{Kind: ErrHub, Msg: fmt.Sprintf("unexpected answer from %s for %s (%s); is HF_ENDPOINT a Hugging Face hub?", c.endpoint, repo, status)}
}

// offlineAdvice ends every network error: the cache may already hold the model.
const offlineAdvice = "; to use only models already in the cache, set HF_HUB_OFFLINE=1"

// hubMessage is the Hub's own explanation: X-Error-Message, else {"error": "..."}.
func hubMessage(resp *http.Response) string {
	if m := resp.Header.Get("X-Error-Message"); m != "" {
		return m
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil {
		return body.Error
	}
	return ""
}

// networkError reports a failed exchange with the Hub. A cancelled context is reported
// as such, not as a network problem (nor does it trigger the fallback to the cache).
func (c *client) networkError(ctx context.Context, doing string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", doing, context.Cause(ctx))
	}
	return &Error{Kind: ErrNetwork, Msg: fmt.Sprintf("cannot reach the hub at %s to %s: %v; check the network, a proxy (HTTPS_PROXY) or HF_ENDPOINT%s",
		c.endpoint, doing, err, offlineAdvice), Err: err}
}

// networkOrHub classifies a failure while reading a body: a broken connection is a
// network error, anything else (malformed JSON) a bad answer.
func (c *client) networkOrHub(ctx context.Context, doing string, err error) error {
	var ne net.Error
	if ctx.Err() != nil || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
		return c.networkError(ctx, doing, err)
	}
	return &Error{Kind: ErrHub, Msg: fmt.Sprintf("%s: %v; is HF_ENDPOINT a Hugging Face hub?", doing, err), Err: err}
}

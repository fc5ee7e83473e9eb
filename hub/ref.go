package hub

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// defaultRevision is the branch used when a reference names none.
const defaultRevision = "main"

// preferredTag is the quantisation chosen when a repository holds several GGUF files and
// the reference names none (matched case-insensitively, so Qwen's ...-f16.gguf counts):
// F16 embeds faster than Q8_0 on AVX2 CPUs (1.25-1.47x the tokens/s of Q8_0 on the
// 0.6B model, two Zen 3 cores: docs/performance.md, "Weight type and kernel") and is a
// GPU's native type; :Q8_0 halves the memory.
const preferredTag = "F16"

// repoRef is a parsed Hub reference.
type repoRef struct {
	Owner, Name string
	// File is an exact path inside the repository ("" when not given).
	File string
	// Tag is a quantisation such as Q8_0 ("" when not given).
	Tag string
	// Revision is a branch, tag or commit ("" means main).
	Revision string
}

func (r repoRef) repoID() string { return r.Owner + "/" + r.Name }

func (r repoRef) revision() string {
	if r.Revision == "" {
		return defaultRevision
	}
	return r.Revision
}

var (
	// repoPart follows the Hub's rules for user, organisation and repository names:
	// letters, digits, '-', '_' and '.', starting and ending with a letter or digit
	// ('_' allowed at the end), at most 96 characters; "--" and ".." are refused by the
	// Hub and would break the cache's models--{owner}--{name} naming.
	repoPart = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?$`)
	tagRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// revisionRE admits branch and tag names (including refs/pr/N) and commit hashes;
	// the revision becomes a path under refs/, so nothing that could leave it.
	revisionRE = regexp.MustCompile(`^[A-Za-z0-9._][A-Za-z0-9._/-]*$`)
	commitRE   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// refSyntax is quoted by parse errors.
const refSyntax = "owner/name[:QUANT][@REVISION] or owner/name/FILE.gguf[@REVISION]"

// parseRef parses owner/name[/FILE.gguf][:TAG][@REVISION]. The tag may also follow the
// revision (owner/name@REV:TAG): git forbids ':' in ref names, so either order is
// unambiguous.
func parseRef(s string) (repoRef, error) {
	var r repoRef
	body := s
	if i := strings.IndexByte(body, '@'); i >= 0 {
		body, r.Revision = body[:i], body[i+1:]
		if j := strings.IndexByte(r.Revision, ':'); j >= 0 {
			r.Revision, r.Tag = r.Revision[:j], r.Revision[j+1:]
			if r.Tag == "" {
				return repoRef{}, fmt.Errorf("empty quantisation after ':' in %q (expected %s)", s, refSyntax)
			}
		}
		if r.Revision == "" {
			return repoRef{}, fmt.Errorf("empty revision after '@' in %q (expected %s)", s, refSyntax)
		}
		if !revisionRE.MatchString(r.Revision) || hasDotDot(r.Revision) || strings.HasSuffix(r.Revision, "/") {
			return repoRef{}, fmt.Errorf("invalid revision %q in %q: use a branch, tag or commit hash", r.Revision, s)
		}
	}
	if i := strings.IndexByte(body, ':'); i >= 0 {
		if r.Tag != "" {
			return repoRef{}, fmt.Errorf("two quantisations in %q (expected %s)", s, refSyntax)
		}
		body, r.Tag = body[:i], body[i+1:]
		if r.Tag == "" {
			return repoRef{}, fmt.Errorf("empty quantisation after ':' in %q (expected %s)", s, refSyntax)
		}
	}
	if r.Tag != "" && !tagRE.MatchString(r.Tag) {
		return repoRef{}, fmt.Errorf("invalid quantisation %q in %q (e.g. Q8_0, f16)", r.Tag, s)
	}
	parts := strings.Split(body, "/")
	if len(parts) < 2 {
		return repoRef{}, fmt.Errorf("%q is not a Hugging Face reference (expected %s)", s, refSyntax)
	}
	r.Owner, r.Name = parts[0], parts[1]
	for _, p := range []string{r.Owner, r.Name} {
		if !repoPart.MatchString(p) || strings.Contains(p, "--") || strings.Contains(p, "..") {
			return repoRef{}, fmt.Errorf("invalid repository name %q in %q (expected %s)", r.Owner+"/"+r.Name, s, refSyntax)
		}
	}
	if len(parts) > 2 {
		r.File = strings.Join(parts[2:], "/")
		for _, seg := range parts[2:] {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\\\x00") {
				return repoRef{}, fmt.Errorf("invalid file path %q in %q", r.File, s)
			}
		}
		if !isGGUF(r.File) {
			return repoRef{}, fmt.Errorf("%q in %q is not a .gguf file; embed-stack loads GGUF models only", r.File, s)
		}
		if r.Tag != "" {
			return repoRef{}, fmt.Errorf("%q names both a file and a quantisation; give one of them", s)
		}
	}
	return r, nil
}

// hasDotDot refuses ".." anywhere: git forbids it in ref names, and it would let a
// revision climb out of refs/.
func hasDotDot(rev string) bool { return strings.Contains(rev, "..") }

func isGGUF(name string) bool { return strings.HasSuffix(strings.ToLower(name), ".gguf") }

// ggufFiles keeps the .gguf entries of a repository listing, sorted.
func ggufFiles(all []string) []string {
	var out []string
	for _, f := range all {
		if isGGUF(f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// matchesTag reports whether a GGUF file name carries the quantisation tag as one of
// its '-' or '.' separated parts, case-insensitively: Qwen3-Embedding-0.6B-Q8_0.gguf
// and model.Q8_0.gguf match Q8_0; Qwen3-Embedding-0.6B-IQ8_0.gguf does not.
func matchesTag(file, tag string) bool {
	base := path.Base(file)
	stem := strings.ToUpper(base[:len(base)-len(".gguf")])
	want := strings.ToUpper(tag)
	for _, tok := range strings.FieldsFunc(stem, func(r rune) bool { return r == '-' || r == '.' }) {
		if tok == want {
			return true
		}
	}
	return false
}

// selectFile picks the file a reference means among a repository's .gguf files. The
// error is an *Error of kind ErrNotFound or ErrAmbiguous that lists what is available.
func selectFile(r repoRef, ggufs []string) (string, error) {
	where := fmt.Sprintf("%s at revision %s", r.repoID(), r.revision())
	if len(ggufs) == 0 {
		return "", selectErr(ErrNotFound, "%s has no .gguf files; use a GGUF repository such as Qwen/Qwen3-Embedding-0.6B-GGUF", where)
	}
	switch {
	case r.File != "":
		if slices.Contains(ggufs, r.File) {
			return r.File, nil
		}
		return "", selectErr(ErrNotFound, "file %q not found in %s; its .gguf files are: %s", r.File, where, listFiles(ggufs))
	case r.Tag != "":
		m := filterTag(ggufs, r.Tag)
		switch len(m) {
		case 1:
			return m[0], nil
		case 0:
			return "", selectErr(ErrNotFound, "no .gguf file in %s matches quantisation %q; its .gguf files are: %s", where, r.Tag, listFiles(ggufs))
		}
		return "", selectErr(ErrAmbiguous, "quantisation %q matches several files in %s: %s; name one as %s/FILE.gguf", r.Tag, where, listFiles(m), r.repoID())
	}
	if m := filterTag(ggufs, preferredTag); len(m) == 1 {
		return m[0], nil
	} else if len(m) > 1 {
		return "", selectErr(ErrAmbiguous, "several %s files in %s: %s; name one as %s/FILE.gguf", preferredTag, where, listFiles(m), r.repoID())
	}
	if len(ggufs) == 1 {
		return ggufs[0], nil
	}
	return "", selectErr(ErrAmbiguous, "%s has several .gguf files and none is %s: %s; choose one with %s:QUANT (e.g. :Q8_0) or %s/FILE.gguf",
		where, preferredTag, listFiles(ggufs), r.repoID(), r.repoID())
}

func selectErr(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

func filterTag(files []string, tag string) []string {
	var out []string
	for _, f := range files {
		if matchesTag(f, tag) {
			out = append(out, f)
		}
	}
	return out
}

// listFiles joins file names for an error message, eliding a long tail so a repository
// with hundreds of quantisations still gives a readable message.
func listFiles(files []string) string {
	const most = 20
	if len(files) <= most {
		return strings.Join(files, ", ")
	}
	return strings.Join(files[:most], ", ") + fmt.Sprintf(", … and %d more", len(files)-most)
}

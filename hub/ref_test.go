package hub

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	tests := []struct {
		in   string
		want repoRef
		err  string
	}{
		{in: "Qwen/Qwen3-Embedding-0.6B-GGUF", want: repoRef{Owner: "Qwen", Name: "Qwen3-Embedding-0.6B-GGUF"}},
		{in: "Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0", want: repoRef{Owner: "Qwen", Name: "Qwen3-Embedding-0.6B-GGUF", Tag: "Q8_0"}},
		{in: "Qwen/Qwen3-Embedding-0.6B-GGUF:f16@v2", want: repoRef{Owner: "Qwen", Name: "Qwen3-Embedding-0.6B-GGUF", Tag: "f16", Revision: "v2"}},
		{in: "Qwen/Qwen3-Embedding-0.6B-GGUF@v2:f16", want: repoRef{Owner: "Qwen", Name: "Qwen3-Embedding-0.6B-GGUF", Tag: "f16", Revision: "v2"}},
		{in: "Qwen/Qwen3-Embedding-0.6B-GGUF@refs/pr/3", want: repoRef{Owner: "Qwen", Name: "Qwen3-Embedding-0.6B-GGUF", Revision: "refs/pr/3"}},
		{in: "Qwen/Qwen3-Embedding-0.6B-GGUF/Qwen3-Embedding-0.6B-Q8_0.gguf", want: repoRef{Owner: "Qwen", Name: "Qwen3-Embedding-0.6B-GGUF", File: "Qwen3-Embedding-0.6B-Q8_0.gguf"}},
		{in: "a/b/sub/dir/m.GGUF@0123456789abcdef0123456789abcdef01234567", want: repoRef{Owner: "a", Name: "b", File: "sub/dir/m.GGUF", Revision: "0123456789abcdef0123456789abcdef01234567"}},
		{in: "Qwen/Qwen3:Q8_0@main:f16", err: `two quantisations in "Qwen/Qwen3:Q8_0@main:f16"`},
		{in: "Qwen/Qwen3:", err: `empty quantisation after ':'`},
		{in: "Qwen/Qwen3@", err: `empty revision after '@'`},
		{in: "Qwen/Qwen3@../../etc", err: `invalid revision "../../etc"`},
		{in: "Qwen/Qwen3@/abs", err: `invalid revision "/abs"`},
		{in: "Qwen/Qwen3:Q8 0", err: `invalid quantisation "Q8 0"`},
		{in: "Qwen", err: `"Qwen" is not a Hugging Face reference`},
		{in: "Qwen--x/y", err: `invalid repository name "Qwen--x/y"`},
		{in: "-bad/y", err: `invalid repository name "-bad/y"`},
		{in: "a/b/../c.gguf", err: `invalid file path "../c.gguf"`},
		{in: "a/b//c.gguf", err: `invalid file path "/c.gguf"`},
		{in: "a/b/README.md", err: `"README.md" in "a/b/README.md" is not a .gguf file`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseRef(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseRef = %+v, %v; want error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseRef = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestMatchesTag(t *testing.T) {
	tests := []struct {
		file, tag string
		want      bool
	}{
		{"Qwen3-Embedding-0.6B-Q8_0.gguf", "q8_0", true},
		{"Qwen3-Embedding-0.6B-f16.gguf", "F16", true},
		{"model.Q4_K_M.gguf", "Q4_K_M", true},
		{"sub/model-Q8_0-imat.gguf", "Q8_0", true},
		{"Qwen3-Embedding-0.6B-IQ8_0.gguf", "Q8_0", false},
		{"Qwen3-Embedding-0.6B-Q4_K_M.gguf", "K_M", false},
		{"Q8_0/model.gguf", "Q8_0", false}, // the folder is not the file's quantisation
		{"Qwen3-Embedding-0.6B-BF16.gguf", "F16", false},
	}
	for _, tt := range tests {
		if got := matchesTag(tt.file, tt.tag); got != tt.want {
			t.Errorf("matchesTag(%q, %q) = %v, want %v", tt.file, tt.tag, got, tt.want)
		}
	}
}

func TestSelectFile(t *testing.T) {
	qwen := []string{"Qwen3-Embedding-0.6B-Q8_0.gguf", "Qwen3-Embedding-0.6B-f16.gguf"}
	tests := []struct {
		name  string
		ref   repoRef
		files []string
		want  string
		kind  error
		msg   string
	}{
		{name: "prefer F16", ref: repoRef{Owner: "o", Name: "n"}, files: qwen, want: qwen[1]},
		{name: "only file", ref: repoRef{Owner: "o", Name: "n"}, files: []string{"x-BF16.gguf"}, want: "x-BF16.gguf"},
		{name: "tag", ref: repoRef{Owner: "o", Name: "n", Tag: "q8_0"}, files: qwen, want: qwen[0]},
		{name: "exact", ref: repoRef{Owner: "o", Name: "n", File: qwen[0]}, files: qwen, want: qwen[0]},
		{name: "ambiguous", ref: repoRef{Owner: "o", Name: "n"}, files: []string{"a-BF16.gguf", "a-Q8_0.gguf"}, kind: ErrAmbiguous,
			msg: "o/n at revision main has several .gguf files and none is F16: a-BF16.gguf, a-Q8_0.gguf; choose one with o/n:QUANT (e.g. :Q8_0) or o/n/FILE.gguf"},
		{name: "none", ref: repoRef{Owner: "o", Name: "n", Revision: "v1"}, kind: ErrNotFound,
			msg: "o/n at revision v1 has no .gguf files; use a GGUF repository such as Qwen/Qwen3-Embedding-0.6B-GGUF"},
		{name: "long list elided", ref: repoRef{Owner: "o", Name: "n", Tag: "Q2_K"}, files: numbered(25), kind: ErrNotFound,
			msg: "m-19-F16.gguf, … and 5 more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selectFile(tt.ref, ggufFiles(tt.files))
			if tt.kind != nil {
				if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("selectFile = %q, %v; want %v containing %q", got, err, tt.kind, tt.msg)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("selectFile = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func numbered(n int) []string {
	var out []string
	for i := range n {
		out = append(out, "m-"+string(rune('0'+i/10))+string(rune('0'+i%10))+"-F16.gguf")
	}
	return out
}

package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

// stage is one FROM and what follows it.
type stage struct {
	from  string
	name  string
	instr []instruction
}

// parseDockerfile splits a Dockerfile into stages of instructions, joining lines
// continued with a backslash and dropping comments, as BuildKit's parser does.
func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	var stages []stage
	var cur *instruction
	flush := func() {
		if cur == nil {
			return
		}
		if cur.cmd == "FROM" {
			f := strings.Fields(cur.args)
			st := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
		} else {
			if len(stages) == 0 {
				t.Fatalf("line %d: %s before FROM", cur.line, cur.cmd)
			}
			stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, *cur)
		}
		cur = nil
	}
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur == nil) {
			continue
		}
		cont := strings.HasSuffix(line, "\\")
		line = strings.TrimSuffix(line, "\\")
		if cur == nil {
			cmd, args, _ := strings.Cut(line, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else {
			cur.args += " " + strings.TrimSpace(line)
		}
		if !cont {
			flush()
		}
	}
	flush()
	return stages
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e2e.RepoRoot(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	aptInstallRE = regexp.MustCompile(`apt-get install ([^&;|\n]*)`)
	jsonFormRE   = regexp.MustCompile(`^\[\s*"`)
)

// aptPackages lists the packages of every apt-get install in s.
func aptPackages(s string) []string {
	var pkgs []string
	s = regexp.MustCompile(`\\\n`).ReplaceAllString(s, " ") // continuation lines
	for _, m := range aptInstallRE.FindAllStringSubmatch(s, -1) {
		for _, w := range strings.Fields(m[1]) {
			if !strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "$") && !strings.HasPrefix(w, `"$`) {
				pkgs = append(pkgs, w)
			}
		}
	}
	return pkgs
}

// lint applies hadolint's rules that matter for these files, and returns findings.
func lint(stages []stage, production bool) []string {
	var out []string
	add := func(in instruction, msg string) {
		out = append(out, fmt.Sprintf("line %d %s: %s", in.line, in.cmd, msg))
	}
	for _, st := range stages {
		// DL3006/DL3007: base images pinned to a tag, never latest.
		if !strings.Contains(st.from, ":") || strings.HasSuffix(st.from, ":latest") {
			out = append(out, "FROM "+st.from+": pin the image to a version tag")
		}
		for _, in := range st.instr {
			switch in.cmd {
			case "RUN":
				if strings.Contains(in.args, "apt-get install") {
					if !strings.Contains(in.args, "--no-install-recommends") { // DL3015
						add(in, "apt-get install without --no-install-recommends")
					}
					if !regexp.MustCompile(`apt-get install[^&;|]* -y\b|apt-get install -y`).MatchString(in.args) { // DL3014
						add(in, "apt-get install without -y")
					}
					if !strings.Contains(in.args, "apt-get update") { // DL3009 and stale lists
						add(in, "apt-get install without apt-get update in the same RUN")
					}
					if !strings.Contains(in.args, "rm -rf /var/lib/apt/lists/*") { // DL3009
						add(in, "apt lists not removed in the same RUN")
					}
				}
				if strings.Contains(in.args, "apt ") || strings.HasPrefix(in.args, "apt ") { // DL3027
					add(in, "use apt-get, not apt")
				}
				if strings.Contains(in.args, "sudo ") { // DL3004
					add(in, "do not use sudo")
				}
				if strings.Contains(in.args, " | ") && !strings.Contains(in.args, "pipefail") { // DL4006
					add(in, "a pipe without set -o pipefail")
				}
			case "CMD", "ENTRYPOINT":
				if !jsonFormRE.MatchString(in.args) { // DL3025
					add(in, "use the JSON (exec) form")
				}
			case "ADD": // DL3020
				add(in, "use COPY for files")
			case "WORKDIR":
				if !strings.HasPrefix(in.args, "/") { // DL3000
					add(in, "use an absolute WORKDIR")
				}
			}
		}
	}
	if production {
		last := stages[len(stages)-1]
		user := ""
		for _, in := range last.instr {
			if in.cmd == "USER" {
				user = in.args
			}
		}
		if user == "" || user == "root" || user == "0" { // DL3002
			out = append(out, "the final stage runs as root: add a USER")
		}
	}
	return out
}

func TestLintRefusesBadDockerfiles(t *testing.T) {
	bad := `FROM debian
RUN apt install curl
RUN apt-get install curl
ADD x /x
WORKDIR src
CMD serve --addr 0.0.0.0:8080
`
	got := lint(parseDockerfile(t, bad), true)
	want := []string{
		"FROM debian: pin the image to a version tag",
		"line 2 RUN: use apt-get, not apt",
		"line 3 RUN: apt-get install without --no-install-recommends",
		"line 3 RUN: apt-get install without -y",
		"line 3 RUN: apt-get install without apt-get update in the same RUN",
		"line 3 RUN: apt lists not removed in the same RUN",
		"line 4 ADD: use COPY for files",
		"line 5 WORKDIR: use an absolute WORKDIR",
		"line 6 CMD: use the JSON (exec) form",
		"the final stage runs as root: add a USER",
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// goVersion is go.mod's go directive as major.minor ("1.26").
func goVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(readRepoFile(t, "go.mod"))
	if m == nil {
		t.Fatal("no go directive in go.mod")
	}
	return m[1]
}

func TestDockerfileDev(t *testing.T) {
	text := readRepoFile(t, "Dockerfile.dev")
	stages := parseDockerfile(t, text)
	if findings := lint(stages, false); len(findings) > 0 {
		t.Errorf("lint:\n%s", strings.Join(findings, "\n"))
	}
	if len(stages) != 1 || !strings.HasPrefix(stages[0].from, "golang:"+goVersion(t)+"-") {
		t.Errorf("FROM %v, want one golang:%s-* stage (go.mod's Go)", stages, goVersion(t))
	}
	have := aptPackages(text)
	// Everything CI and `make deps` install, plus the compilers the golang image lacks.
	ci := readRepoFile(t, ".ci/run")
	var want []string
	if m := regexp.MustCompile(`for pkg in ([^;]+);`).FindStringSubmatch(ci); m != nil {
		want = append(want, strings.Fields(m[1])...)
	} else {
		t.Fatal(".ci/run: no `for pkg in …;` list of packages")
	}
	for _, m := range regexp.MustCompile(`missing\+=\(([a-z0-9.+-]+)\)`).FindAllStringSubmatch(ci, -1) {
		want = append(want, m[1])
	}
	want = append(want, aptPackages(makeTarget(t, "deps"))...)
	want = append(want, "g++", "make", "git")
	for _, p := range want {
		if !slices.Contains(have, p) {
			t.Errorf("Dockerfile.dev does not install %s (CI or make deps does); it installs %v", p, have)
		}
	}
	if !strings.Contains(text, "make test") {
		t.Error("Dockerfile.dev does not say how to run make test in it")
	}
}

// makeTarget returns the recipe of a Makefile target.
func makeTarget(t *testing.T, name string) string {
	t.Helper()
	mk := readRepoFile(t, "Makefile")
	m := regexp.MustCompile(`(?ms)^` + regexp.QuoteMeta(name) + `:[^\n]*\n((?:\t[^\n]*\n)+)`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatalf("Makefile has no target %s", name)
	}
	return m[1]
}

func TestDockerfile(t *testing.T) {
	text := readRepoFile(t, "Dockerfile")
	stages := parseDockerfile(t, text)
	if findings := lint(stages, true); len(findings) > 0 {
		t.Errorf("lint:\n%s", strings.Join(findings, "\n"))
	}
	if len(stages) != 2 || stages[0].name != "build" || !strings.HasPrefix(stages[0].from, "golang:"+goVersion(t)+"-") {
		t.Fatalf("stages %+v, want a golang:%s build stage and a runtime stage", stages, goVersion(t))
	}
	build := stages[0]
	var runs []string
	for _, in := range build.instr {
		if in.cmd == "RUN" {
			runs = append(runs, in.args)
		}
	}
	// make portable is make build (the step CI runs) for a baseline CPU, plus the CPU
	// kernel variants.
	if !slices.ContainsFunc(runs, func(r string) bool { return strings.HasPrefix(r, "make portable") }) {
		t.Errorf("the build stage does not run make portable: %v", runs)
	}
	if recipe := makeTarget(t, "portable"); !strings.Contains(recipe, "$(MAKE) build MARCH=$(PORTABLE_MARCH)") || !strings.Contains(recipe, "$(MAKE) cpu-variants") {
		t.Errorf("make portable is not make build plus make cpu-variants:\n%s", recipe)
	}
	for _, p := range aptPackages(makeTarget(t, "deps")) {
		if p == "nodejs" || p == "npm" || p == "python3" || p == "python3-venv" || p == "haproxy" || p == "chromium" || p == "unzip" || p == "g++-aarch64-linux-gnu" { // test tools, not build ones
			continue
		}
		if !slices.Contains(aptPackages(text), p) {
			t.Errorf("the build stage does not install %s, which make deps installs for the cgo build", p)
		}
	}

	final := stages[1]
	got := map[string]string{}
	var copies []string
	for _, in := range final.instr {
		got[in.cmd] = in.args
		if in.cmd == "COPY" {
			copies = append(copies, in.args)
		}
	}
	// The binary, and beside it (../lib/embed-stack, where workers look) the backend
	// folder with the CPU kernel variants.
	for _, want := range []string{"--from=build /src/bin/embed-stack /usr/local/bin/embed-stack", "--from=build /src/lib/embed-stack /usr/local/lib/embed-stack"} {
		if !slices.Contains(copies, want) {
			t.Errorf("COPY %q missing from %q", want, copies)
		}
	}
	checks := []struct{ cmd, want string }{
		{"USER", "embed"},
		{"ENTRYPOINT", `["embed-stack"]`},
		{"CMD", `["serve", "--addr", "0.0.0.0:8080"]`},
		{"EXPOSE", "8080"},
	}
	for _, c := range checks {
		if got[c.cmd] != c.want {
			t.Errorf("%s %q, want %q", c.cmd, got[c.cmd], c.want)
		}
	}
	hc := got["HEALTHCHECK"]
	// /ready, not /health: /health is 200 as soon as the API listens, while every
	// request still gets 503 until the model is loaded.
	if !strings.Contains(hc, `CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/ready"]`) || !strings.Contains(hc, "--start-period=") {
		t.Errorf("HEALTHCHECK %q, want curl on /ready with a start period for the model download", hc)
	}
	if !slices.Contains(aptPackages(text), "curl") {
		t.Error("the runtime stage does not install curl, which the HEALTHCHECK runs")
	}
	if !strings.Contains(got["ENV"], "EMBED_STACK_MODEL=Qwen/Qwen3-Embedding-0.6B-GGUF:f16") || !strings.Contains(got["ENV"], "HF_HOME=/data/huggingface") {
		t.Errorf("ENV %q, want the official model and HF_HOME on the volume", got["ENV"])
	}
}

// TestDockerignore: the context keeps everything `make build` needs and leaves out
// build outputs and models.
func TestDockerignore(t *testing.T) {
	var patterns []string
	for _, l := range strings.Split(readRepoFile(t, ".dockerignore"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimSuffix(l, "/"))
		}
	}
	ignored := func(path string) bool {
		for _, p := range patterns {
			p = strings.TrimPrefix(p, "**/")
			for _, part := range []string{path, filepath.Base(path)} {
				if ok, _ := filepath.Match(p, part); ok {
					return true
				}
			}
			if strings.HasPrefix(path, p+"/") {
				return true
			}
		}
		return false
	}
	for _, keep := range []string{"go.mod", "go.sum", "Makefile", "cmd/embed-stack/main.go", "backends/llama/include/miniaudio/miniaudio.h", "scripts/fetch-tokenizer.sh", "cmake/cpu/variants.cmake", "cmake/ggml.cmake"} {
		if ignored(keep) {
			t.Errorf(".dockerignore drops %s, which the build needs", keep)
		}
	}
	// lib/: the host's backend libraries (its CPU variants, a CUDA backend) must not
	// reach the image, which builds its own.
	for _, drop := range []string{"bin/embed-stack", "lib/embed-stack/libggml-cpu-haswell.so", "models/tiny.gguf", ".git", "conformance/node/node_modules"} {
		if !ignored(drop) {
			t.Errorf(".dockerignore keeps %s in the build context", drop)
		}
	}
}

// TestReadmeDockerRun: the `docker run` lines of README.md and docs/install.md publish
// the port the image exposes and mount a volume at the image's VOLUME, the Hugging Face
// cache, so that a second start does not download the model again.
func TestReadmeDockerRun(t *testing.T) {
	final := parseDockerfile(t, readRepoFile(t, "Dockerfile"))[1]
	got := map[string]string{}
	for _, in := range final.instr {
		got[in.cmd] = in.args
	}
	volume := regexp.MustCompile(`\["([^"]+)"\]`).FindStringSubmatch(got["VOLUME"])
	if volume == nil {
		t.Fatalf("Dockerfile VOLUME %q: want one path in exec form", got["VOLUME"])
	}
	for _, page := range []string{"README.md", "docs/install.md"} {
		lines := regexp.MustCompile(`(?m)^docker run .*$`).FindAllString(readRepoFile(t, page), -1)
		if len(lines) == 0 {
			t.Errorf("%s has no docker run line", page)
		}
		for _, l := range lines {
			if !strings.Contains(l, "-p 8080:"+got["EXPOSE"]) || !regexp.MustCompile(`-v [a-z-]+:`+regexp.QuoteMeta(volume[1])+`\b`).MatchString(l) {
				t.Errorf("%s: %q does not publish port %s and mount a volume at %s", page, l, got["EXPOSE"], volume[1])
			}
			if !strings.HasSuffix(strings.TrimSpace(l), " embed-stack") {
				t.Errorf("%s: %q does not run the image embed-stack that the page builds", page, l)
			}
		}
		if !strings.Contains(readRepoFile(t, page), "docker build -t embed-stack .") {
			t.Errorf("%s does not say how to build the image embed-stack", page)
		}
	}
}

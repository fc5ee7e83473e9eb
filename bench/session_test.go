package bench

import (
	"io"
	"slices"
	"testing"
)

func TestParsePeer(t *testing.T) {
	p, err := ParsePeer("tei=http://127.0.0.1:9000/v1,model=qwen,pid=42")
	if err != nil || p != (Peer{Name: "tei", URL: "http://127.0.0.1:9000/v1", Model: "qwen", PID: 42}) {
		t.Errorf("ParsePeer = %+v, %v", p, err)
	}
	p, err = ParsePeer("x=http://h/v1")
	if err != nil || p.Model != "bench" || p.PID != 0 {
		t.Errorf("defaults: %+v, %v", p, err)
	}
}

func TestSessionSizes(t *testing.T) {
	for _, tt := range []struct{ long, modelCtx, want int }{
		{15000, 32768, 15040}, {15000, 0, 15040}, {100, 0, 8192}, {40000, 32768, 32768},
	} {
		if got := FloorContext(tt.long, tt.modelCtx); got != tt.want {
			t.Errorf("FloorContext(%d, %d) = %d, want %d", tt.long, tt.modelCtx, got, tt.want)
		}
	}
	for long, want := range map[int]int{1024: 4096, 4096: 4096, 15000: 16384, 32769: 65536} {
		if got := OllamaNumCtx(long); got != want {
			t.Errorf("OllamaNumCtx(%d) = %d, want %d", long, got, want)
		}
	}
}

// The embed-stack serve the harness starts embeds each text as it is sent, with
// --prompts=none ahead of any --serve-arg: Corpus has already wrapped every text in
// the model's prompts, so a serve applying its own (E5's "passage: ", nomic's
// "search_document: ") would embed the prompt twice and fail the vector check on
// its token count. With --quick's serve flags, given ones and --cpu-variant alike.
// bench's --weights (default auto) and --weights-cache follow, so that the served
// model computes with the floor's weights, each unless a --serve-arg gives its own.
func TestSessionServeTakesTextsAsSent(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"--prompts=none", "--weights=auto"}},
		{[]string{"--quick"}, []string{"--prompts=none", "--weights=auto", "--warm-max-tokens=512", "--max-input-tokens=2048"}},
		{[]string{"--serve-arg=--decode-tokens=2048", "--cpu-variant", "haswell"}, []string{"--prompts=none", "--weights=auto", "--decode-tokens=2048", "--cpu-variant=haswell"}},
		{[]string{"--serve-arg=--weights=file"}, []string{"--prompts=none", "--weights=file"}},
		{[]string{"--weights", "BF16", "--weights-cache", "/tmp/w"}, []string{"--prompts=none", "--weights=bf16", "--weights-cache=/tmp/w"}},
		{[]string{"--weights=auto", "--weights-cache=/tmp/w", "--serve-arg=--weights-cache=/tmp/x"}, []string{"--prompts=none", "--weights=auto", "--weights-cache=/tmp/x"}},
	} {
		var f Flags
		args := append([]string{"--model", "m.gguf", "--corpus", "c.txt"}, tt.args...)
		if err := f.Parse(NewFlagSet(&f), args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		s, err := f.Session(args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if s.Serve == nil || !slices.Equal(s.Serve.Args, tt.want) {
			t.Errorf("%v: serve %+v, want the flags %q", tt.args, s.Serve, tt.want)
		}
	}
	// --url: a server the harness does not start, whose flags are its owner's.
	var f Flags
	args := []string{"--model", "m.gguf", "--corpus", "c.txt", "--url", "http://127.0.0.1:1/v1"}
	if err := f.Parse(NewFlagSet(&f), args); err != nil {
		t.Fatal(err)
	}
	if s, err := f.Session(args, io.Discard); err != nil || s.Serve != nil {
		t.Errorf("--url: serve %+v, %v; want none started", s.Serve, err)
	}
}

// TestFlagsWeights: bench's --weights takes serve's modes, auto by default (what
// serve runs unless told otherwise, so the figures are a user's), and refuses another.
func TestFlagsWeights(t *testing.T) {
	var f Flags
	if err := f.Parse(NewFlagSet(&f), []string{"--model", "m.gguf", "--corpus", "c.txt"}); err != nil || f.Weights != "auto" {
		t.Errorf("default: %q, %v; want auto", f.Weights, err)
	}
	f = Flags{}
	err := f.Parse(NewFlagSet(&f), []string{"--model", "m.gguf", "--corpus", "c.txt", "--weights", "fp8"})
	if want := `--weights: unknown weights mode "fp8": choose auto, file, bf16`; err == nil || err.Error() != want {
		t.Errorf("--weights fp8: %v, want %q", err, want)
	}
}

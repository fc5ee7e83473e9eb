package backends

import (
	"errors"
	"flag"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestWorkerArgsRoundTrip: what Args writes, Parse reads back as the same value,
// and the flags come in the one order that logs and the MLX worker's tests expect.
func TestWorkerArgsRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name string
		a    WorkerArgs
		want []string
	}{
		{"warm", WorkerArgs{Model: "/m/q.gguf", Socket: "/s/w.sock", Ctx: 8192, Batch: 512, Threads: 8, Buckets: []int{256, 1024, 8192},
			Task: TaskRerank, LogFormat: "json", LogLevel: "debug", DeviceArgs: DeviceArgs{Device: "cuda:1", GPULayers: 7, BackendDir: "/opt/lib", CPUVariant: "zen4"}},
			[]string{"--model", "/m/q.gguf", "--threads", "8", "--log-format", "json", "--log-level", "debug",
				"--device", "cuda:1", "--gpu-layers", "7", "--backend-dir", "/opt/lib", "--cpu-variant", "zen4", "--task", "rerank",
				"--ctx", "8192", "--batch", "512", "--buckets", "256,1024,8192", "--socket", "/s/w.sock"}},
		{"ephemeral", WorkerArgs{Model: "m.gguf", Socket: "w.sock", Ctx: 33024, Seqs: 4, Nice: 10, IgnoreStdin: true, Task: TaskEmbed,
			LogFormat: "text", LogLevel: "info", DeviceArgs: DeviceArgs{Device: "auto"}},
			[]string{"--model", "m.gguf", "--log-format", "text", "--log-level", "info", "--device", "auto", "--gpu-layers", "0",
				"--ctx", "33024", "--seqs", "4", "--nice", "10", "--ignore-stdin", "--socket", "w.sock"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.a.Args()
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Args() = %q\nwant      %q", got, tt.want)
			}
			var back WorkerArgs
			var out strings.Builder
			if err := back.Parse(got, &out); err != nil {
				t.Fatalf("Parse: %v\n%s", err, out.String())
			}
			if !reflect.DeepEqual(back, tt.a) {
				t.Errorf("Parse(Args()) = %+v\nwant %+v", back, tt.a)
			}
		})
	}
	// What backends appends to a spec's arguments, and a worker for mlx-embed-server
	// (no device: it picks no ggml device).
	if got := (WorkerArgs{Ctx: 64}).Args(); !slices.Equal(got, []string{"--ctx", "64"}) {
		t.Errorf("ephemeral's addition = %q", got)
	}
	if got := (WorkerArgs{Model: "/snap", Ctx: 8192}).Args(); !slices.Equal(got, []string{"--model", "/snap", "--ctx", "8192"}) {
		t.Errorf("no device = %q", got)
	}
}

// TestWorkerArgsParse: defaults, the refusals (reported on the output as the flag
// package reports its own), and -h.
func TestWorkerArgsParse(t *testing.T) {
	var a WorkerArgs
	var out strings.Builder
	if err := a.Parse([]string{"--model", "m", "--socket", "s"}, &out); err != nil {
		t.Fatal(err)
	}
	want := WorkerArgs{Model: "m", Socket: "s", Task: TaskEmbed, LogFormat: "text", LogLevel: "info", DeviceArgs: DeviceArgs{Device: DefaultDevice}}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("defaults = %+v, want %+v", a, want)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "m"}, "embed-stack worker: --model and --socket are required\n"},
		{[]string{"--model", "m", "--socket", "s", "--task", "classify"}, "embed-stack worker: --task \"classify\" is not one of embed, rerank\n"},
		{[]string{"--model", "m", "--socket", "s", "--buckets", "256,x"}, "embed-stack worker: --buckets: \"x\" is not a positive number of tokens\n"},
	} {
		var a WorkerArgs
		var out strings.Builder
		if err := a.Parse(tt.args, &out); err == nil || out.String() != tt.want {
			t.Errorf("Parse(%q) = %v, output %q; want %q", tt.args, err, out.String(), tt.want)
		}
	}
	out.Reset()
	if err := new(WorkerArgs).Parse([]string{"--nope"}, &out); err == nil || !strings.HasPrefix(out.String(), "flag provided but not defined: -nope\nUsage: embed-stack worker --model PATH --socket PATH [flags]") {
		t.Errorf("unknown flag: %v, output %q", err, out.String())
	}
	out.Reset()
	if err := new(WorkerArgs).Parse([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "  -backend-dir folder") {
		t.Errorf("-h: %v, output %q", err, out.String())
	}
}

func TestParseLengths(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{"256,1024,8192", []int{256, 1024, 8192}, ""},
		{" 8192, 256 ,256,", []int{256, 8192}, ""},
		{"", nil, ""},
		{"256,x", nil, `"x" is not a positive number of tokens`},
		{"0", nil, `"0" is not a positive number of tokens`},
	}
	for _, tt := range tests {
		got, err := ParseLengths(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseLengths(%q): err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseLengths(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if back, _ := ParseLengths(JoinLengths(got)); !slices.Equal(back, got) {
			t.Errorf("JoinLengths(%v) does not read back: %v", got, back)
		}
	}
}

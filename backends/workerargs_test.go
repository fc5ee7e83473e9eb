package backends

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
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
			Pooling: "mean", LogFormat: "text", LogLevel: "info", DeviceArgs: DeviceArgs{Device: "auto"}},
			[]string{"--model", "m.gguf", "--log-format", "text", "--log-level", "info", "--device", "auto", "--gpu-layers", "0",
				"--pooling", "mean", "--ctx", "33024", "--seqs", "4", "--nice", "10", "--ignore-stdin", "--socket", "w.sock"}},
		{"warm, releasing its long inputs' KV cache", WorkerArgs{Model: "m.gguf", Socket: "w.sock", Ctx: 8192, ReleaseKV: 90 * time.Second, Task: TaskEmbed,
			LogFormat: "text", LogLevel: "info", DeviceArgs: DeviceArgs{Device: "auto"}},
			[]string{"--model", "m.gguf", "--log-format", "text", "--log-level", "info", "--device", "auto", "--gpu-layers", "0",
				"--ctx", "8192", "--release-kv", "1m30s", "--socket", "w.sock"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.a.Args()
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Args() = %q\nwant      %q", got, tt.want)
			}
			var back WorkerArgs
			if err := back.Parse(got); err != nil {
				t.Fatalf("Parse: %v", err)
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

// TestWorkerArgsParse: defaults, the refusals, and -h, worded as
// flagconfig.Report shows them.
func TestWorkerArgsParse(t *testing.T) {
	var a WorkerArgs
	if err := a.Parse([]string{"--model", "m", "--socket", "s"}); err != nil {
		t.Fatal(err)
	}
	want := WorkerArgs{Model: "m", Socket: "s", Task: TaskEmbed, LogFormat: "text", LogLevel: "info", DeviceArgs: DeviceArgs{Device: DefaultDevice}}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("defaults = %+v, want %+v", a, want)
	}
	const usage = "Usage: embed-stack worker --model PATH --socket PATH [flags]\nRun 'embed-stack worker --help' for every flag.\n"
	for _, tt := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"--model", "m"}, 2, "embed-stack worker: --model and --socket are required\n"},
		{[]string{"--model", "m", "--socket", "s", "--task", "classify"}, 2, "embed-stack worker: --task \"classify\" is not one of embed, rerank\n"},
		{[]string{"--model", "m", "--socket", "s", "--pooling", "max"}, 2, "embed-stack worker: --pooling \"max\" is not one of mean, cls, last\n"},
		{[]string{"--model", "m", "--socket", "s", "--buckets", "256,x"}, 2, "embed-stack worker: --buckets: \"x\" is not a positive number of tokens\n"},
		{[]string{"--nope"}, 2, "embed-stack worker: unknown flag --nope\n" + usage},
		{[]string{"--sokcet", "s"}, 2, "embed-stack worker: unknown flag --sokcet; did you mean --socket?\n" + usage},
		{[]string{"--gpu-layers", "-1"}, 2, "embed-stack worker: --gpu-layers must not be negative; got -1\n"},
		{[]string{"--release-kv", "-1s"}, 2, "embed-stack worker: --release-kv must not be negative; got -1s\n"},
	} {
		var stdout, stderr strings.Builder
		err := new(WorkerArgs).Parse(tt.args)
		if got := flagconfig.Report(err, "embed-stack worker", &stdout, &stderr); got != tt.status || stderr.String() != tt.want || stdout.Len() > 0 {
			t.Errorf("Parse(%q): status %d, stderr %q; want %d, %q", tt.args, got, stderr.String(), tt.status, tt.want)
		}
	}
	var stdout, stderr strings.Builder
	err := new(WorkerArgs).Parse([]string{"-h"})
	if got := flagconfig.Report(err, "embed-stack worker", &stdout, &stderr); !errors.Is(err, flagconfig.ErrHelp) || got != 0 ||
		!strings.Contains(stdout.String(), "\n  --backend-dir DIR      folder of loadable ggml backends: GPU ones such as\n") || stderr.Len() > 0 {
		t.Errorf("-h: %v, status %d, stdout %q", err, got, stdout.String())
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

// TestCheckCPUAccel: --cpu-accel takes auto, off, avx512 and avx2, and refuses a
// kernel set the CPU lacks an instruction of, naming it (flag sets as
// /proc/cpuinfo gives them).
func TestCheckCPUAccel(t *testing.T) {
	zen3 := cpuvariant.Host{Arch: "amd64", Flags: map[string]bool{"avx": true, "avx2": true, "fma": true}}
	zen5 := cpuvariant.Host{Arch: "amd64", Flags: map[string]bool{"avx": true, "avx2": true, "fma": true, "avx512f": true}}
	old := cpuvariant.Host{Arch: "amd64", Flags: map[string]bool{"avx": true, "avx2": true}}
	arm := cpuvariant.Host{Arch: "arm64", Flags: map[string]bool{"asimd": true}}
	for _, tc := range []struct {
		h    cpuvariant.Host
		v    string
		want string
	}{
		{zen5, "", ""}, {zen5, "auto", ""}, {zen5, "off", ""}, {zen5, "avx512", ""}, {zen5, "avx2", ""},
		{zen3, "avx2", ""}, {zen3, "auto", ""}, {arm, "off", ""}, {arm, "auto", ""},
		{zen3, "avx512", "avx512: this CPU lacks AVX512F (not in /proc/cpuinfo's flags)"},
		{old, "avx2", "avx2: this CPU lacks FMA (not in /proc/cpuinfo's flags)"},
		{arm, "avx2", "avx2: embed-stack's CPU kernels are x86-64 ones; this binary is for arm64"},
		{zen5, "fast", `"fast" is not auto, off, avx512 or avx2`},
	} {
		err := CheckCPUAccel(tc.h, tc.v)
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
			t.Errorf("CheckCPUAccel(%v, %q) = %v, want %q", tc.h.Flags, tc.v, err, tc.want)
		}
	}
}

package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/backends"
)

func TestCheckRoutingFlags(t *testing.T) {
	base := func() *serveFlags {
		return &serveFlags{warmBuckets: "256,1024,8192", warmMaxTokens: 4096, batchMaxTokens: 2048, ephemeralQueue: 8, batchWindow: time.Millisecond}
	}
	f := base()
	if err := checkRoutingFlags(f); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.buckets, []int{256, 1024, 4096}) {
		t.Errorf("buckets %v, want [256 1024 4096]: capped at --warm-max-tokens", f.buckets)
	}
	for _, tt := range []struct {
		change func(*serveFlags)
		want   string
	}{
		{func(f *serveFlags) { f.warmBuckets = "256,big" }, `--warm-buckets: "big" is not a positive number of tokens; give comma-separated token counts such as 256,1024,8192`},
		{func(f *serveFlags) { f.maxEphemeral = -1 }, "--max-ephemeral must not be negative (0 picks the default); got -1"},
		{func(f *serveFlags) { f.batchMaxTokens = 0 }, "--batch-max-tokens must be at least 1; got 0"},
		{func(f *serveFlags) { f.batchWindow = -time.Second }, "--batch-window must not be negative (0 turns batching off); got -1s"},
	} {
		f := base()
		tt.change(f)
		if err := checkRoutingFlags(f); err == nil || err.Error() != tt.want {
			t.Errorf("err = %v\nwant %s", err, tt.want)
		}
	}
}

func TestWarmStartError(t *testing.T) {
	err := warmStartError(fmt.Errorf("starting the warm worker: %w", &backends.CapacityError{PID: 7, MaxTokens: 4096, Want: 8192}), 8192)
	const want = "--warm-max-tokens is 8192 but the warm worker holds inputs of at most 4096 tokens; lower --warm-max-tokens to 4096"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q\nwant it to start %q", err, want)
	}
	err = warmStartError(fmt.Errorf("starting the warm worker: %w", &backends.DimensionError{PID: 7, NEmbd: 768, Want: 1024}), 8192)
	const wantDim = "the warm worker computes 768-dimensional vectors but --model has 1024; with --warm-backend mlx, give --mlx-model the same model as --model: starting the warm worker: the worker (pid 7) computes 768-dimensional vectors, but the model has 1024: is it running another model?"
	if err.Error() != wantDim {
		t.Errorf("message %q\nwant %q", err, wantDim)
	}
	other := errors.New("boom")
	if err := warmStartError(other, 8192); !errors.Is(err, other) || err.Error() != "warm worker: boom" {
		t.Errorf("other failure: %v", err)
	}
}

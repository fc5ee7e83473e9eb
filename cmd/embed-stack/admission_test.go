package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/backends"
)

func TestWarmBuckets(t *testing.T) {
	got, err := warmBuckets("256,1024,8192", 4096)
	if err != nil || !slices.Equal(got, []int{256, 1024, 4096}) {
		t.Errorf("buckets %v (%v), want [256 1024 4096]: capped at --warm-max-tokens", got, err)
	}
	const want = `--warm-buckets: "big" is not a positive number of tokens; give comma-separated token counts such as 256,1024,8192`
	if _, err := warmBuckets("256,big", 8192); err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
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

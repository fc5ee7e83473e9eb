package main

import (
	"slices"
	"testing"
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

package main

import (
	"fmt"
	"slices"

	"github.com/embed-stack/embed-stack/backends"
)

// warmBuckets reads --warm-buckets, capping its lengths at the warm worker's.
func warmBuckets(flag string, warmMax int) ([]int, error) {
	buckets, err := backends.ParseLengths(flag)
	if err != nil {
		return nil, fmt.Errorf("--warm-buckets: %w; give comma-separated token counts such as 256,1024,8192", err)
	}
	for i, b := range buckets {
		buckets[i] = min(b, warmMax)
	}
	return slices.Compact(buckets), nil
}

// ephemeralQueue turns --ephemeral-queue into routing.Config.EphemeralQueue, where
// 0 means the default and a negative value none.
func ephemeralQueue(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}

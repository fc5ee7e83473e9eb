package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/embed-stack/embed-stack/backends"
)

// checkEphemeralLimits refuses bounds under which the longest accepted input could
// never run.
func checkEphemeralLimits(l backends.Capacity, maxInput int) error {
	if l.Tokens < maxInput {
		return fmt.Errorf("--max-ephemeral-tokens (%d) is below --max-input-tokens (%d): the longest inputs would only ever run alone; raise it or lower --max-input-tokens", l.Tokens, maxInput)
	}
	if l.Workers < 1 {
		return errors.New("--max-ephemeral must be at least 1")
	}
	return nil
}

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

// warmStartError words a failed start of the warm worker, naming the flag to change
// when the worker holds shorter inputs than --warm-max-tokens.
func warmStartError(err error, warmMax int) error {
	var ce *backends.CapacityError
	if errors.As(err, &ce) {
		return fmt.Errorf("--warm-max-tokens is %d but the warm worker holds inputs of at most %d tokens; lower --warm-max-tokens to %d (longer inputs then go to ephemeral workers): %w",
			warmMax, ce.MaxTokens, ce.MaxTokens, err)
	}
	var de *backends.DimensionError
	if errors.As(err, &de) {
		return fmt.Errorf("the warm worker computes %d-dimensional vectors but --model has %d; with --warm-backend mlx, give --mlx-model the same model as --model: %w", de.NEmbd, de.Want, err)
	}
	return fmt.Errorf("warm worker: %w", err)
}

// capacity returns the admission bounds of the engine's ephemeral workers: the
// flags, with those left at 0 sized to this machine and model
// (backends.CapacityConfig), at the model's own input limits (engine.maxInput and
// warmMax). warm is every model's warm worker memory when several models share
// the machine (warmBytes), nil for one.
func (e *engine) capacity(cfg engineConfig, warm []int64) (backends.Capacity, error) {
	c, err := e.capacityConfig(cfg.MaxEphemeral, cfg.MaxEphemeralTokens, e.maxInput, e.warmMax)
	if err != nil {
		return backends.Capacity{}, err
	}
	c.Warm = warm
	l := c.Capacity()
	return l, checkEphemeralLimits(l, e.maxInput)
}

// warmBytes is what the engine's warm worker holds once loaded, with a context of
// warmCtx tokens (backends.CapacityConfig.WarmBytes).
func (e *engine) warmBytes(warmCtx int) (int64, error) {
	c, err := e.capacityConfig(0, 0, 0, warmCtx)
	return c.WarmBytes(), err
}

// capacityConfig describes the engine's model and this machine for sizing.
func (e *engine) capacityConfig(workers, tokens, maxInput, warmCtx int) (backends.CapacityConfig, error) {
	kv, err := e.facts.KVBytesPerToken()
	if err != nil {
		return backends.CapacityConfig{}, err
	}
	c := backends.CapacityConfig{Workers: workers, Tokens: tokens, MaxInput: maxInput, WarmContext: warmCtx, KVBytesPerToken: kv, Device: e.device}
	c.HostMemory()
	return c, c.WeightsOf(e.modelPath)
}

// ephemeralQueue turns --ephemeral-queue into routing.Config.EphemeralQueue, where
// 0 means the default and a negative value none.
func ephemeralQueue(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}

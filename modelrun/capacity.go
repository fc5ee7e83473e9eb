package modelrun

import (
	"errors"
	"fmt"

	"github.com/embed-stack/embed-stack/backends"
)

// Capacity returns the admission bounds of the model's ephemeral workers:
// Config.MaxEphemeral and MaxEphemeralTokens, those left at 0 sized to this machine
// and model (backends.CapacityConfig), at the model's own input limits (MaxInput
// and WarmMax). warm is every model's warm worker memory when several models share
// the machine (WarmBytes), nil for one. Bounds under which the longest input could
// never run are refused.
func (m *Model) Capacity(warm []int64) (backends.Capacity, error) {
	c, err := m.capacityConfig(m.cfg.MaxEphemeral, m.cfg.MaxEphemeralTokens, m.MaxInput, m.WarmMax)
	if err != nil {
		return backends.Capacity{}, err
	}
	c.Warm = warm
	l := c.Capacity()
	return l, checkEphemeralLimits(l, m.MaxInput)
}

// WarmBytes is what the model's warm worker holds once loaded, with its context
// of WarmMax tokens (backends.CapacityConfig.WarmBytes).
func (m *Model) WarmBytes() (int64, error) {
	c, err := m.capacityConfig(0, 0, 0, m.WarmMax)
	return c.WarmBytes(), err
}

// capacityConfig describes the model and this machine for sizing.
func (m *Model) capacityConfig(workers, tokens, maxInput, warmCtx int) (backends.CapacityConfig, error) {
	kv, err := m.Facts.KVBytesPerToken()
	if err != nil {
		return backends.CapacityConfig{}, err
	}
	c := backends.CapacityConfig{Workers: workers, Tokens: tokens, MaxInput: maxInput, WarmContext: warmCtx, KVBytesPerToken: kv, Device: m.Device}
	c.HostMemory()
	return c, c.WeightsOf(m.Weights.Path)
}

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

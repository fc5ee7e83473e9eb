package llama

import (
	"context"
	"fmt"
)

// warmUpTokens is the length of WarmUp's throwaway sequences.
const warmUpTokens = 32

// WarmUp readies the engine for inputs of the given lengths, so that the first real
// one is as fast as later ones: for each context that would embed such an input it
// creates the context if it is not yet there and decodes one short throwaway
// sequence in it. That is all a first input pays for on the CPU. Measured on the
// 0.6B shape, without WarmUp the first 20-token input took 1.25 times as long as the
// second (the short context's creation and first decode); after WarmUp, and after
// any first input for the sizes that came next, the first and second inputs of 20,
// 256 and 1024 tokens were within 1% (docs/routing.md). Decoding a whole input of
// each length would cost what the input costs (8192 tokens of the 0.6B model: about
// a minute on two cores) for nothing measurable.
//
// Given any length, WarmUp readies the short-input context as well: queries, the
// inputs whose latency matters most, go there, whether or not the bucket list names
// a length under FlashMaxTokens (the seed list, 256, 1024 and 8192, does not).
func (e *Engine) WarmUp(ctx context.Context, lengths []int) error {
	if len(lengths) == 0 {
		return nil
	}
	done := map[*kctx]bool{}
	for _, n := range append([]int{1}, lengths...) {
		n = min(max(n, 1), e.info.ContextTokens)
		k := e.contextFor(n)
		if done[k] {
			continue
		}
		done[k] = true
		seq := make([]int32, min(n, warmUpTokens))
		for i := range seq {
			seq[i] = int32(i % e.info.NVocab)
		}
		_, err := do(ctx, e, false, func() (struct{}, error) {
			if err := e.create(k); err != nil {
				return struct{}{}, err
			}
			decodes := 0
			return struct{}{}, e.decodeAll(ctx, k, [][]int32{seq}, []int{0}, [][]float32{make([]float32, e.info.NEmbd)}, &decodes)
		})
		if err != nil {
			return fmt.Errorf("llama: warming up the context for %d-token inputs: %w", n, err)
		}
	}
	return nil
}

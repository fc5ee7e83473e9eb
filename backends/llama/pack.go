package llama

// span is a run of consecutive tokens of one input sequence that goes into one decode
// call. A sequence longer than the room left in a decode call is split into several
// spans over consecutive calls; causal attention and the KV cache carry its prefix,
// so the split does not change its vector.
type span struct {
	input    int // index into the caller's sequences
	slot     int // llama.cpp seq_id within the round, 0..MaxSeqs-1
	from, to int // token range [from, to) of the input sequence
	last     bool
}

// round is the work done between two clears of the KV cache: whole sequences fed
// through one or more decode calls.
type round struct {
	decodes [][]span
}

// plan packs sequences of the given lengths, in input order, into rounds of at most
// maxSeqs sequences, and each round into decode calls of at most batchTokens tokens.
// Every length must be in [1, ctxTokens]; Embed checks that first.
//
// A round's token budget is the whole number of decode calls its first sequence needs
// (one for a short sequence), capped at ctxTokens; a round closes when the next whole
// sequence would not fit. Rounds are kept this small, rather than filling the context,
// because with one KV buffer shared by all sequences every query of a decode call
// scans every cell of its round, masked or not (ggml's CPU flash attention and
// llama.cpp's mask construction are both O(tokens x cells)): on the 0.6B shape,
// 32 x 256 tokens ran about 15% faster in rounds of 2048 tokens than in one round of
// 8192, and the tiny model about 25% faster.
//
// Input order is kept rather than sorting by length: the vectors do not depend on the
// packing, and keeping order makes a round's work easy to reason about in tests.
func plan(lengths []int, ctxTokens, batchTokens, maxSeqs int) []round {
	var rounds []round
	start := 0
	for start < len(lengths) {
		calls := (lengths[start] + batchTokens - 1) / batchTokens
		budget := min(ctxTokens, calls*batchTokens)
		end, total := start, 0
		for end < len(lengths) && end-start < maxSeqs && total+lengths[end] <= budget {
			total += lengths[end]
			end++
		}
		rounds = append(rounds, round{decodes: splitDecodes(lengths, start, end, batchTokens)})
		start = end
	}
	return rounds
}

// splitDecodes lays the sequences lengths[start:end] end to end and cuts the stream
// into decode calls of at most batchTokens tokens.
func splitDecodes(lengths []int, start, end, batchTokens int) [][]span {
	var decodes [][]span
	var cur []span
	room := batchTokens
	for i := start; i < end; i++ {
		from := 0
		for from < lengths[i] {
			n := min(lengths[i]-from, room)
			cur = append(cur, span{input: i, slot: i - start, from: from, to: from + n, last: from+n == lengths[i]})
			from += n
			room -= n
			if room == 0 {
				decodes = append(decodes, cur)
				cur, room = nil, batchTokens
			}
		}
	}
	if len(cur) > 0 {
		decodes = append(decodes, cur)
	}
	return decodes
}

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

// round is the work done between two clears of the KV cache: whole sequences whose
// tokens together fit in the context, fed through one or more decode calls.
type round struct {
	decodes [][]span
}

// plan packs sequences of the given lengths, in input order, into rounds of at most
// ctxTokens tokens and maxSeqs sequences (greedy: a round closes when the next whole
// sequence would not fit), and each round into decode calls of at most batchTokens
// tokens. Every length must be in [1, ctxTokens]; Embed checks that first.
//
// Input order is kept rather than sorting by length: the vectors do not depend on the
// packing, and keeping order makes a round's work easy to reason about in tests.
func plan(lengths []int, ctxTokens, batchTokens, maxSeqs int) []round {
	var rounds []round
	start := 0
	for start < len(lengths) {
		end, total := start, 0
		for end < len(lengths) && end-start < maxSeqs && total+lengths[end] <= ctxTokens {
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

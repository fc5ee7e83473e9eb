package llama

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestPlan(t *testing.T) {
	tests := []struct {
		name                string
		lengths             []int
		ctx, batch, maxSeqs int
		want                []round
	}{
		{
			name:    "one sequence, one call",
			lengths: []int{5}, ctx: 16, batch: 8, maxSeqs: 4,
			want: []round{{decodes: [][]span{{{input: 0, slot: 0, from: 0, to: 5, last: true}}}}},
		},
		{
			name:    "a long sequence takes the whole number of calls it needs, shared",
			lengths: []int{5, 3, 1}, ctx: 16, batch: 4, maxSeqs: 4,
			want: []round{
				{decodes: [][]span{
					{{input: 0, slot: 0, from: 0, to: 4}},
					{{input: 0, slot: 0, from: 4, to: 5, last: true}, {input: 1, slot: 1, from: 0, to: 3, last: true}},
				}},
				{decodes: [][]span{{{input: 2, slot: 0, from: 0, to: 1, last: true}}}},
			},
		},
		{
			name:    "a sequence straddles calls in its round",
			lengths: []int{5, 6}, ctx: 16, batch: 4, maxSeqs: 4,
			want: []round{
				{decodes: [][]span{
					{{input: 0, slot: 0, from: 0, to: 4}},
					{{input: 0, slot: 0, from: 4, to: 5, last: true}},
				}},
				{decodes: [][]span{
					{{input: 1, slot: 0, from: 0, to: 4}},
					{{input: 1, slot: 0, from: 4, to: 6, last: true}},
				}},
			},
		},
		{
			name:    "one call's worth per round for short sequences",
			lengths: []int{3, 3, 3}, ctx: 16, batch: 8, maxSeqs: 4,
			want: []round{
				{decodes: [][]span{{{input: 0, slot: 0, from: 0, to: 3, last: true}, {input: 1, slot: 1, from: 0, to: 3, last: true}}}},
				{decodes: [][]span{{{input: 2, slot: 0, from: 0, to: 3, last: true}}}},
			},
		},
		{
			name:    "context caps the round budget",
			lengths: []int{10, 7, 6}, ctx: 12, batch: 8, maxSeqs: 4,
			want: []round{
				{decodes: [][]span{{{input: 0, slot: 0, from: 0, to: 8}}, {{input: 0, slot: 0, from: 8, to: 10, last: true}}}},
				{decodes: [][]span{{{input: 1, slot: 0, from: 0, to: 7, last: true}}}},
				{decodes: [][]span{{{input: 2, slot: 0, from: 0, to: 6, last: true}}}},
			},
		},
		{
			name:    "budget closes a round",
			lengths: []int{10, 7, 6}, ctx: 16, batch: 16, maxSeqs: 4,
			want: []round{
				{decodes: [][]span{{{input: 0, slot: 0, from: 0, to: 10, last: true}}}},
				{decodes: [][]span{{{input: 1, slot: 0, from: 0, to: 7, last: true}, {input: 2, slot: 1, from: 0, to: 6, last: true}}}},
			},
		},
		{
			name:    "sequence cap closes a round",
			lengths: []int{1, 1, 1}, ctx: 16, batch: 16, maxSeqs: 2,
			want: []round{
				{decodes: [][]span{{{input: 0, slot: 0, from: 0, to: 1, last: true}, {input: 1, slot: 1, from: 0, to: 1, last: true}}}},
				{decodes: [][]span{{{input: 2, slot: 0, from: 0, to: 1, last: true}}}},
			},
		},
		{
			name:    "exact fit fills the call",
			lengths: []int{8, 8, 4, 4}, ctx: 16, batch: 8, maxSeqs: 2,
			want: []round{
				{decodes: [][]span{{{input: 0, slot: 0, from: 0, to: 8, last: true}}}},
				{decodes: [][]span{{{input: 1, slot: 0, from: 0, to: 8, last: true}}}},
				{decodes: [][]span{{{input: 2, slot: 0, from: 0, to: 4, last: true}, {input: 3, slot: 1, from: 0, to: 4, last: true}}}},
			},
		},
		{name: "nothing to do", lengths: nil, ctx: 16, batch: 8, maxSeqs: 2, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(tt.lengths, tt.ctx, tt.batch, tt.maxSeqs)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("plan(%v, ctx=%d, batch=%d, seqs=%d)\n got %+v\nwant %+v", tt.lengths, tt.ctx, tt.batch, tt.maxSeqs, got, tt.want)
			}
		})
	}
}

// TestPlanInvariants checks, over random shapes, what embed relies on: every token of
// every sequence is fed exactly once, in order, with its own slot; calls and rounds
// respect their budgets (a round takes no more calls than its first sequence needs);
// each sequence has exactly one output, at its last token.
func TestPlanInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 500 {
		ctx := 1 + rng.IntN(64)
		batch := 1 + rng.IntN(ctx)
		maxSeqs := 1 + rng.IntN(8)
		lengths := make([]int, rng.IntN(30))
		for i := range lengths {
			lengths[i] = 1 + rng.IntN(ctx)
		}
		next := make([]int, len(lengths)) // next token expected per sequence
		outputs := make([]int, len(lengths))
		seen := 0 // sequences whose round has started
		for ri, r := range plan(lengths, ctx, batch, maxSeqs) {
			roundTokens, slots := 0, map[int]int{}
			for _, d := range r.decodes {
				callTokens := 0
				for _, sp := range d {
					if sp.from != next[sp.input] || sp.to <= sp.from || sp.to > lengths[sp.input] {
						t.Fatalf("iter %d round %d: span %+v out of order (next %d, len %d)", iter, ri, sp, next[sp.input], lengths[sp.input])
					}
					if s, ok := slots[sp.input]; ok && s != sp.slot {
						t.Fatalf("iter %d: input %d changed slot %d -> %d", iter, sp.input, s, sp.slot)
					}
					slots[sp.input] = sp.slot
					next[sp.input] = sp.to
					if sp.last != (sp.to == lengths[sp.input]) {
						t.Fatalf("iter %d: span %+v last flag wrong", iter, sp)
					}
					if sp.last {
						outputs[sp.input]++
					}
					callTokens += sp.to - sp.from
				}
				if callTokens > batch {
					t.Fatalf("iter %d: decode call of %d tokens > batch %d", iter, callTokens, batch)
				}
				roundTokens += callTokens
			}
			first := lengths[seen]
			if calls := (first + batch - 1) / batch; len(r.decodes) != calls {
				t.Fatalf("iter %d round %d: %d calls; its first sequence (%d tokens) needs %d", iter, ri, len(r.decodes), first, calls)
			}
			if roundTokens > ctx || len(slots) > maxSeqs {
				t.Fatalf("iter %d round %d: %d tokens, %d sequences; limits %d, %d", iter, ri, roundTokens, len(slots), ctx, maxSeqs)
			}
			for in, s := range slots {
				if s != in-seen {
					t.Fatalf("iter %d: input %d in slot %d, want %d", iter, in, s, in-seen)
				}
				if next[in] != lengths[in] {
					t.Fatalf("iter %d: input %d unfinished at end of its round", iter, in)
				}
			}
			seen += len(slots)
		}
		for i := range lengths {
			if outputs[i] != 1 || next[i] != lengths[i] {
				t.Fatalf("iter %d: input %d has %d outputs, fed %d of %d tokens", iter, i, outputs[i], next[i], lengths[i])
			}
		}
	}
}

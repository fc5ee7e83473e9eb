package bench

import (
	"fmt"
	"math"
)

// Goal is one target of the benchmark issue read off a report. Met is nil where the
// goal is a figure to report, not a bound, or where the run lacks what it needs
// (Measured then says what).
type Goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      *bool  `json:"met"`
}

// GoalSpec is what the goals need beyond the report.
type GoalSpec struct {
	// WarmContext is the warm worker's context in tokens (0: 8192), whose KV cache
	// the warm worker's memory bound allows for.
	WarmContext int
	// KVElemBytes is the KV cache's bytes per element (0: 2, llama.cpp's F16).
	KVElemBytes int
}

const mb = 1e6

// Goals evaluates the targets on rep, for the first contender of RoleOurs
// against the first RoleFloor and every RolePeer.
func Goals(rep *Report, spec GoalSpec) []Goal {
	ours, floor := rep.ByRole(RoleOurs), rep.ByRole(RoleFloor)
	if ours == nil {
		return nil
	}
	warmCtx := orInt(spec.WarmContext, 8192)
	elem := orInt(spec.KVElemBytes, 2)
	var gs []Goal
	add := func(name, target, measured string, met *bool) {
		gs = append(gs, Goal{Name: name, Target: target, Measured: measured, Met: met})
	}
	get := func(shape, name string) *Result {
		r := rep.Result(shape, name)
		if r == nil || r.Skipped != "" || r.LatencyMS.N == 0 {
			return nil
		}
		return r
	}
	missing := func(name, target string, shapes ...string) {
		add(name, target, fmt.Sprintf("not measured (needs %v on both sides)", shapes), nil)
	}
	floorName := ""
	if floor != nil {
		floorName = floor.Name
	}

	// Single short query against the floor.
	if o, f := get(ShapeShort, ours.Name), get(ShapeShort, floorName); o != nil && f != nil {
		q := o.LatencyMS.Median / f.LatencyMS.Median
		add("single short query, end to end", "≤ 1.10 × floor (p50)",
			fmt.Sprintf("%.2f × (%.1f ms against %.1f ms)", q, o.LatencyMS.Median, f.LatencyMS.Median), ptr(q <= 1.10))
		d := o.LatencyMS.Median - f.LatencyMS.Median
		add("server overhead", "< 2 ms (p50 over the floor)", fmt.Sprintf("%.2f ms", d), ptr(d < 2))
	} else {
		missing("single short query, end to end", "≤ 1.10 × floor (p50)", ShapeShort)
	}

	// Batch throughput.
	batch := GridShape(32, 512)
	if o, f := get(batch, ours.Name), get(batch, floorName); o != nil && f != nil {
		q := o.TokensPerSec.Median / f.TokensPerSec.Median
		add("batch throughput 32 × 512", "≥ 0.95 × floor", fmt.Sprintf("%.2f × (%.1f tok/s against %.1f)", q, o.TokensPerSec.Median, f.TokensPerSec.Median), ptr(q >= 0.95))
	} else {
		missing("batch throughput 32 × 512", "≥ 0.95 × floor", batch)
	}

	// Concurrency.
	c16, c1 := get(ClientsShape(16), ours.Name), get(ClientsShape(1), ours.Name)
	if c16 != nil && c1 != nil {
		q := c16.TokensPerSec.Median / c1.TokensPerSec.Median
		add("16 concurrent single-query clients", "≥ 1.5 × one by one (tokens/s of 1 client)",
			fmt.Sprintf("%.2f × (%.1f tok/s against %.1f)", q, c16.TokensPerSec.Median, c1.TokensPerSec.Median), ptr(q >= 1.5))
	} else {
		missing("16 concurrent single-query clients", "≥ 1.5 × one by one", ClientsShape(16), ClientsShape(1))
	}

	for _, p := range rep.Contenders {
		if p.Role != RolePeer {
			continue
		}
		for _, sh := range []string{batch, ClientsShape(16)} {
			name := fmt.Sprintf("%s: ahead of %s", sh, p.Name)
			o, pr := get(sh, ours.Name), get(sh, p.Name)
			if o == nil || pr == nil {
				reason := "not measured"
				if p.Excluded != "" {
					reason = p.Name + " not timed: " + p.Excluded
				}
				add(name, "tokens/s above the peer's", reason, nil)
				continue
			}
			q := o.TokensPerSec.Median / pr.TokensPerSec.Median
			add(name, "tokens/s above the peer's", fmt.Sprintf("%.2f × (%.1f against %.1f tok/s)", q, o.TokensPerSec.Median, pr.TokensPerSec.Median), ptr(q > 1))
		}
		if ours.Memory != nil && p.Memory != nil {
			// PSS where both have it: embed-stack's workers map the same model
			// file, which RSS would count once per worker.
			a, b, what := ours.Memory.Peak.RSS, p.Memory.Peak.RSS, "RSS"
			if ours.Memory.Peak.PSS > 0 && p.Memory.Peak.PSS > 0 {
				a, b, what = ours.Memory.Peak.PSS, p.Memory.Peak.PSS, "PSS"
			}
			add(fmt.Sprintf("peak memory below %s's", p.Name), "process tree's memory at its peak below the peer's",
				fmt.Sprintf("%s against %s (%s)", mib(a), mib(b), what), ptr(a < b))
		}
	}

	// Head-of-line blocking: one goal per in-flight shape of the run.
	inFlight := []string{ShapeInFlight}
	for _, s := range rep.Shapes {
		if s.Kind == KindInFlight && s.ID != ShapeInFlight {
			inFlight = append(inFlight, s.ID)
		}
	}
	for _, id := range inFlight {
		name := "short query while a long input is in flight (" + id + ")"
		if r := get(id, ours.Name); r != nil && r.IdleMS != nil && r.InFlightMS != nil && r.InFlightMS.N > 0 && r.IdleMS.N > 0 {
			q := r.InFlightMS.P95 / r.IdleMS.Median
			add(name, "p95 ≤ 3 × idle p50",
				fmt.Sprintf("%.2f × (p95 %.1f ms over %d queries; idle p50 %.1f ms)", q, r.InFlightMS.P95, r.InFlightMS.N, r.IdleMS.Median), ptr(q <= 3))
		} else {
			missing(name, "p95 ≤ 3 × idle p50", id)
		}
	}

	for _, sh := range rep.Shapes {
		if sh.Kind == KindReindex {
			gs = append(gs, reindexGoals(rep, sh.ID)...)
		}
	}

	// Memory.
	if ours.Idle != nil && len(ours.Idle.Procs) > 0 {
		serve := ours.Idle.Procs[0]
		evidence := fmt.Sprintf("%.1f MB", float64(serve.RSS)/mb)
		if serve.Anon > 0 {
			evidence += fmt.Sprintf(" (private %.1f MB, file-backed %.1f MB)", float64(serve.Anon)/mb, float64(serve.RSS-serve.Anon)/mb)
		}
		add("idle memory: serve alone", "< 40 MB RSS", evidence, ptr(float64(serve.RSS) < 40*mb))
		if len(ours.Idle.Procs) > 1 && rep.Model != nil {
			w := ours.Idle.Procs[1]
			peak := w.HWM
			if ours.Memory != nil {
				for _, p := range ours.Memory.Procs {
					if p.PID == w.PID {
						peak = max(peak, p.HWM)
					}
				}
			}
			kv := rep.Model.KVBytesPerToken(elem) * int64(warmCtx)
			bound := 1.1 * float64(rep.Model.FileBytes+kv)
			add("warm worker memory", fmt.Sprintf("≤ (model file + KV cache of %d tokens) × 1.1 = %.0f MB", warmCtx, bound/mb),
				fmt.Sprintf("peak %.0f MB (idle %.0f MB; file %.0f MB, KV %.0f MB)", float64(peak)/mb, float64(w.RSS)/mb, float64(rep.Model.FileBytes)/mb, float64(kv)/mb),
				ptr(float64(peak) <= bound))
		}
		if ours.After != nil {
			extra := len(ours.After.Procs) - len(ours.Idle.Procs)
			add("no long-path process when idle", "as many processes after the run as before it",
				fmt.Sprintf("%d before, %d after", len(ours.Idle.Procs), len(ours.After.Procs)), ptr(extra <= 0))
		}
	}
	if ours.ColdStartMS > 0 {
		m := fmt.Sprintf("%.2f s", ours.ColdStartMS/1000)
		for _, p := range rep.Contenders {
			if p.Role == RolePeer && p.ColdStartMS > 0 {
				m += fmt.Sprintf(" (%s: %.2f s)", p.Name, p.ColdStartMS/1000)
			}
		}
		add("cold start", "process start to first 200, reported", m, nil)
	}

	// The long path's overhead: the server's time for a long input less the floor's
	// compute of the same tokens.
	if o, f := get(ShapeLong, ours.Name), get(ShapeLong, floorName); o != nil && f != nil {
		d := o.LatencyMS.Median - f.LatencyMS.Median
		// Repetitions of the floor bound how finely a difference can be read.
		noise := math.Max(o.LatencyMS.Max-o.LatencyMS.Min, f.LatencyMS.Max-f.LatencyMS.Min)
		m := fmt.Sprintf("%.0f ms over the floor's %.1f s", d, f.LatencyMS.Median/1000)
		if noise > 0 {
			m += fmt.Sprintf(" (repetitions spread %.0f ms)", noise)
		}
		add("spawn-to-result for a long input", "< 500 ms plus its compute", m, ptr(d < 500))
	} else {
		missing("spawn-to-result for a long input", "< 500 ms plus its compute", ShapeLong)
	}
	return gs
}

// reindexGoals are issue 26's targets for the exact cache on the re-index shape:
// at least 4 times the tokens/s of the same server without it, every vector
// bit-identical; and, reported, its ratio to every peer's.
func reindexGoals(rep *Report, shape string) []Goal {
	const name, target = "re-index with the cache (" + ShapeReindex + ")", "≥ 4 × tokens/s without the cache, every vector bit-identical"
	var gs []Goal
	for _, c := range rep.Contenders {
		r := rep.Result(shape, c.Name)
		if c.CacheMiB == 0 || r == nil || r.Reindex == nil {
			continue
		}
		a := r.Reindex
		if a.Reference == "" {
			gs = append(gs, Goal{Name: name, Target: target, Measured: "not measured: no reference answered every request (" + firstNonEmpty(r.FirstError, "see the results") + ")"})
			continue
		}
		ref := rep.Result(shape, a.Reference)
		m := fmt.Sprintf("%.2f × (%.1f against %.1f tok/s), %d of %d vectors bit-identical, %d of %d tokens answered from the cache",
			a.Speedup, r.TokensPerSec.Median, ref.TokensPerSec.Median, a.BitIdentical, a.Docs, a.CachedTokens, a.Tokens)
		gs = append(gs, Goal{Name: name, Target: target, Measured: m, Met: ptr(a.Speedup >= 4 && a.BitIdentical == a.Docs && a.Compared == a.Docs)})
		for _, p := range rep.Contenders {
			pr := rep.Result(shape, p.Name)
			if p.Role != RolePeer || pr == nil || pr.Skipped != "" || pr.TokensPerSec.N == 0 || r.TokensPerSec.N == 0 {
				continue
			}
			gs = append(gs, Goal{Name: fmt.Sprintf("re-index with the cache against %s", p.Name), Target: "tokens/s ratio, reported",
				Measured: fmt.Sprintf("%.2f × (%.1f against %.1f tok/s)", r.TokensPerSec.Median/pr.TokensPerSec.Median, r.TokensPerSec.Median, pr.TokensPerSec.Median)})
		}
		return gs
	}
	return []Goal{{Name: name, Target: target, Measured: "not measured: no server with --cache-size in the run (the harness starts one beside the embed-stack it starts)"}}
}

func ptr(b bool) *bool { return &b }

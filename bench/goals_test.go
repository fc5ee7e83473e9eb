package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func lat(median, p95 float64) Summary {
	return Summary{N: 3, Median: median, Min: median, Max: median, P95: p95, P99: p95}
}

func tps(median float64) Summary {
	return Summary{N: 3, Median: median, Min: median * 0.9, Max: median * 1.1}
}

// sampleReport is a run of the 0.6B shape as the goals read it.
func sampleReport() *Report {
	const mib = 1 << 20
	return &Report{
		Host:  Host{CPUs: 2, CPU: "test CPU", LoadStart: [3]float64{1.5, 1, 1}, LoadEnd: [3]float64{2, 1, 1}, LoadMax1: 2.5},
		Model: &Model{Path: "m.gguf", FileBytes: 1_200_000_000, Arch: "qwen3", Layers: 28, Embd: 1024, Heads: 16, KVHeads: 8, HeadDim: 128, LinearParams: 440_401_920, WeightType: "Q8_0"},
		Contenders: []*ContenderReport{
			{Name: "floor", Role: RoleFloor, About: "in-process engine"},
			{Name: "embed-stack", Role: RoleOurs, ColdStartMS: 1200,
				Check: &CheckResult{Pass: true, MinCosine: 1, Separation: 0.5},
				Idle:  &TreeSnapshot{Procs: []Proc{{PID: 10, RSS: 45e6, Anon: 25e6}, {PID: 11, RSS: 1500 * mib, HWM: 1600 * mib}}, RSS: 45e6 + 1500*mib},
				After: &TreeSnapshot{Procs: []Proc{{PID: 10}, {PID: 11}}},
				Memory: &TreeStats{Peak: TreeSnapshot{RSS: 4000 * mib, PSS: 2000 * mib},
					Procs: []Proc{{PID: 10, HWM: 50e6}, {PID: 11, HWM: 1700 * mib}, {PID: 12, HWM: 2000 * mib}}}},
			{Name: "ollama", Role: RolePeer, ColdStartMS: 2500, Check: &CheckResult{Pass: true, MinCosine: 0.99995, Separation: 0.5},
				Memory: &TreeStats{Peak: TreeSnapshot{RSS: 3000 * mib, PSS: 3000 * mib}}},
		},
		Shapes: []ShapeInfo{{ID: ShapeShort}, {ID: GridShape(32, 512)}, {ID: ClientsShape(1)}, {ID: ClientsShape(16)}, {ID: ShapeInFlight, Kind: KindInFlight}, {ID: InFlightShape(4000), Kind: KindInFlight}, {ID: ShapeLong}},
		Results: []Result{
			{Shape: ShapeShort, Contender: "floor", LatencyMS: lat(100, 110), TokensPerSec: tps(1000)},
			{Shape: ShapeShort, Contender: "embed-stack", LatencyMS: lat(101, 112), TokensPerSec: tps(990)},
			{Shape: ShapeShort, Contender: "ollama", LatencyMS: lat(300, 320), TokensPerSec: tps(333)},
			{Shape: GridShape(32, 512), Contender: "floor", LatencyMS: lat(80000, 80000), TokensPerSec: tps(200), GFLOPS: 180, TokensPerCPUSec: 100},
			{Shape: GridShape(32, 512), Contender: "embed-stack", LatencyMS: lat(81000, 81000), TokensPerSec: tps(196), TokensPerCPUSec: 98},
			{Shape: GridShape(32, 512), Contender: "ollama", LatencyMS: lat(100000, 100000), TokensPerSec: tps(150)},
			{Shape: ClientsShape(1), Contender: "embed-stack", LatencyMS: lat(100, 100), TokensPerSec: tps(100)},
			{Shape: ClientsShape(16), Contender: "embed-stack", LatencyMS: lat(800, 900), TokensPerSec: tps(180)},
			{Shape: ClientsShape(16), Contender: "ollama", LatencyMS: lat(3000, 3500), TokensPerSec: tps(90)},
			{Shape: ShapeInFlight, Contender: "embed-stack", LatencyMS: lat(150, 250), IdleMS: &Summary{N: 10, Median: 100}, InFlightMS: &Summary{N: 40, Median: 150, P95: 250}, LongMS: 15000, LongCancelled: true},
			{Shape: ShapeInFlight, Contender: "floor", Skipped: "not applicable to the in-process engine"},
			{Shape: InFlightShape(4000), Contender: "embed-stack", LatencyMS: lat(150, 400), IdleMS: &Summary{N: 10, Median: 100}, InFlightMS: &Summary{N: 30, Median: 200, P95: 310}, LongMS: 9000},
			{Shape: ShapeLong, Contender: "floor", LatencyMS: lat(60000, 60000), TokensPerSec: tps(250)},
			{Shape: ShapeLong, Contender: "embed-stack", LatencyMS: lat(60300, 60300), TokensPerSec: tps(249)},
		},
	}
}

func TestGoals(t *testing.T) {
	rep := sampleReport()
	goals := Goals(rep, GoalSpec{})
	byName := map[string]Goal{}
	for _, g := range goals {
		byName[g.Name] = g
	}
	tests := []struct {
		name     string
		met      *bool
		measured string // substring
	}{
		{"single short query, end to end", ptr(true), "1.01 × (101.0 ms against 100.0 ms)"},
		{"server overhead", ptr(true), "1.00 ms"},
		{"batch throughput 32 × 512", ptr(true), "0.98 ×"},
		{"16 concurrent single-query clients", ptr(true), "1.80 ×"},
		{"grid/32x512: ahead of ollama", ptr(true), "1.31 ×"},
		{"clients/16: ahead of ollama", ptr(true), "2.00 ×"},
		// PSS, not RSS (which counts the shared model file once per worker).
		{"peak memory below ollama's", ptr(true), "2000 MiB against 3000 MiB (PSS)"},
		{"short query while a long input is in flight (in-flight)", ptr(true), "2.50 ×"},
		{"short query while a long input is in flight (in-flight/4000)", ptr(false), "3.10 ×"},
		{"idle memory: serve alone", ptr(false), "45.0 MB (private 25.0 MB, file-backed 20.0 MB)"},
		// (1.2e9 + 8192 × 114688) × 1.1 = 2353 MB; the worker peaked at 1700 MiB.
		{"warm worker memory", ptr(true), "peak 1783 MB"},
		{"no long-path process when idle", ptr(true), "2 before, 2 after"},
		{"cold start", nil, "1.20 s (ollama: 2.50 s)"},
		{"spawn-to-result for a long input", ptr(true), "300 ms over the floor's 60.0 s"},
	}
	if len(goals) != len(tests) {
		t.Errorf("%d goals, want %d: %+v", len(goals), len(tests), goals)
	}
	for _, tt := range tests {
		g, ok := byName[tt.name]
		if !ok {
			t.Errorf("no goal %q", tt.name)
			continue
		}
		if (g.Met == nil) != (tt.met == nil) || g.Met != nil && *g.Met != *tt.met {
			t.Errorf("%s: met %v, want %v (%s)", tt.name, deref(g.Met), deref(tt.met), g.Measured)
		}
		if !strings.Contains(g.Measured, tt.measured) {
			t.Errorf("%s: measured %q, want it to contain %q", tt.name, g.Measured, tt.measured)
		}
	}
	if !strings.Contains(byName["warm worker memory"].Target, "= 2353 MB") {
		t.Errorf("warm worker bound: %q", byName["warm worker memory"].Target)
	}
}

func TestGoalsMissing(t *testing.T) {
	rep := sampleReport()
	rep.Results = nil
	for _, g := range Goals(rep, GoalSpec{}) {
		if strings.HasPrefix(g.Measured, "not measured") && g.Met != nil {
			t.Errorf("%s: not measured but met = %v", g.Name, *g.Met)
		}
	}
	rep.Contenders = rep.Contenders[:1]
	if gs := Goals(rep, GoalSpec{}); gs != nil {
		t.Errorf("goals without an embed-stack contender: %+v", gs)
	}
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

func TestTable(t *testing.T) {
	rep := sampleReport()
	rep.Goals = Goals(rep, GoalSpec{})
	rep.CheckControl = &Control{What: "no EOS", MaxCosine: 0.61, Caught: true}
	var b bytes.Buffer
	if err := rep.Table(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"load average 1.50 at the start, 2.00 at the end, 2.50 at most",
		"| shape | contender | req | err | p50 ms | p95 ms | p99 ms | tok/s | spread | tok/s ÷ floor | tok/s ÷ ollama | tok/CPU-s (÷ floor) | GFLOP/s | load |",
		// 196 / 200 and 196 / 150; spread (1.1-0.9)/1 / 2 = ±10%.
		"| grid/32x512 | embed-stack | 0 | 0 | 81000.0 | 81000.0 | 81000.0 | 196.0 | ±10% | 0.98× | 1.31× | 98.0 (0.98×) | – |",
		"| grid/32x512 | ollama | 0 | 0 | 100000.0 | 100000.0 | 100000.0 | 150.0 | ±10% | 0.75× | 1.00× | – | – |",
		"| embed-stack | 100.0 | 150.0 | 250.0 | 40 | 2.50 | cancelled after 15.0 s |",
		"| embed-stack | ours | min cos 1.000000 (separation 0.500) | 1.20 s |",
		"Negative control: no EOS agree with the right vectors to cosine 0.6100 at best",
		"| idle memory: serve alone | < 40 MB RSS | 45.0 MB (private 25.0 MB, file-backed 20.0 MB) | no |",
		"Skipped: in-flight on floor (not applicable to the in-process engine).",
		"- floor: in-process engine\n",
		"the floor reached 180.0 GFLOP/s (llama.cpp's Q8_0 kernels, tokens/s × FLOPs per token) on grid/32x512",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// With embed-stack's own CPU kernels taking part, the line says so.
	rep.Host.CPUKernels = "zen4 with embed-stack kernels (AVX-512)"
	b.Reset()
	if err := rep.Table(&b); err != nil {
		t.Fatal(err)
	}
	if want := "the floor reached 180.0 GFLOP/s (llama.cpp's Q8_0 kernels with embed-stack kernels (AVX-512), tokens/s × FLOPs per token)"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
	rep.Host.CPUKernels = ""
	var j bytes.Buffer
	if err := rep.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(j.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if r := back.Result(GridShape(32, 512), "ollama"); r == nil || r.TokensPerSec.Median != 150 || len(back.Goals) != len(rep.Goals) {
		t.Errorf("JSON round trip lost results or goals")
	}
}

// TestTableRatioPerPeer: with two peers, every row has its ratio to each of them.
func TestTableRatioPerPeer(t *testing.T) {
	rep := sampleReport()
	rep.Contenders = append(rep.Contenders, &ContenderReport{Name: "sentence-transformers", Role: RolePeer})
	rep.Results = append(rep.Results, Result{Shape: GridShape(32, 512), Contender: "sentence-transformers", LatencyMS: lat(40000, 40000), TokensPerSec: tps(392)})
	var b bytes.Buffer
	if err := rep.Table(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| spread | tok/s ÷ floor | tok/s ÷ ollama | tok/s ÷ sentence-transformers | tok/CPU-s (÷ floor) |",
		// 196 / 200, 196 / 150 and 196 / 392.
		"| grid/32x512 | embed-stack | 0 | 0 | 81000.0 | 81000.0 | 81000.0 | 196.0 | ±10% | 0.98× | 1.31× | 0.50× |",
		"| grid/32x512 | sentence-transformers | 0 | 0 | 40000.0 | 40000.0 | 40000.0 | 392.0 | ±10% | 1.96× | 2.61× | 1.00× |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

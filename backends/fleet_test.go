package backends

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// newFleetModel is a model of a Fleet over the fake worker, with its switches.
func newFleetModel(t *testing.T, name string, env ...string) FleetModel {
	t.Helper()
	w, _, _ := newWarm(t, env...)
	return FleetModel{Name: name, Warm: &OnDemand{Warm: w, Logger: quietLogger()}}
}

func TestFleetStartsAndReportsAsOne(t *testing.T) {
	f := &Fleet{Models: []FleetModel{newFleetModel(t, "a"), newFleetModel(t, "b")}}
	defer f.Close(context.Background())
	if f.Ready() {
		t.Fatal("Ready before Start")
	}
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !f.Ready() || !f.Healthy() {
		t.Fatalf("after Start: Ready %v, Healthy %v", f.Ready(), f.Healthy())
	}
	for _, m := range f.Models {
		if got, err := m.Warm.Embed(context.Background(), [][]int32{{1, 2}}); err != nil || !equalVec(got[0], fakeVector([]int32{1, 2})) {
			t.Errorf("model %s: Embed = %v, %v", m.Name, got, err)
		}
	}
	v := f.Vars()
	pidA, pidB := f.Models[0].Warm.PID(), f.Models[1].Warm.PID()
	if pidA == 0 || pidB == 0 || pidA == pidB || v["warm_worker_pid"] != pidA || v["model/a/warm_worker_pid"] != int64(pidA) ||
		v["model/b/warm_worker_pid"] != int64(pidB) || v["worker_restarts"] != 0 || v["worker_hang_kills"] != 0 ||
		v["model/b/cold_starts"] != int64(0) || v["model/a/last_cold_start_ms"] != int64(0) || len(v) != 3+2*5 {
		t.Errorf("Vars = %v (pids %d, %d)", v, pidA, pidB)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.Ready() || f.Vars()["warm_worker_pid"] != 0 {
		t.Errorf("after Close: Ready %v, Vars %v", f.Ready(), f.Vars())
	}
}

// TestFleetStartFailsFast: the first model that fails ends Start, naming the model,
// without waiting for a model whose worker never gets ready.
func TestFleetStartFailsFast(t *testing.T) {
	f := &Fleet{Models: []FleetModel{
		newFleetModel(t, "slow", "FAKE_NEVER_READY=1"),
		newFleetModel(t, "broken", "FAKE_LOAD_FAIL=no such tensor"),
	}}
	defer f.Close(context.Background())
	start := time.Now()
	err := f.Start(context.Background())
	var me *ModelError
	if !errors.As(err, &me) || me.Model != "broken" || !strings.HasPrefix(err.Error(), "model broken: ") || !strings.Contains(err.Error(), "no such tensor") {
		t.Fatalf("Start = %v; want the broken model's failure", err)
	}
	// The slow model's ReadyTimeout (newWarm) is 10 s: it was abandoned, not
	// waited for.
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("Start took %s; the slow model's start was not abandoned", took)
	}
	if f.Ready() {
		t.Error("Ready after a failed start")
	}
}

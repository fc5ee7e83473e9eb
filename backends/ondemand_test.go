package backends

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// newOnDemand returns an OnDemand over the fake worker with the given keep-alive,
// and the directory where the fakes record their pids.
func newOnDemand(t *testing.T, keepAlive time.Duration) (*OnDemand, string) {
	t.Helper()
	w, _, records := newWarm(t)
	o := &OnDemand{Warm: w, KeepAlive: keepAlive, HangTimeout: time.Minute, Logger: quietLogger()}
	t.Cleanup(func() {
		if err := o.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoWorkersLeft(t, records)
	})
	return o, records
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOnDemandWithoutKeepAliveIsWarm(t *testing.T) {
	o, records := newOnDemand(t, 0)
	seqs := [][]int32{{1, 2, 3}}
	if _, err := o.Embed(context.Background(), seqs); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Embed before Start: %v, want ErrUnavailable (503 while loading)", err)
	}
	if o.Ready() {
		t.Fatal("Ready before Start")
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := o.PID()
	for range 3 {
		got, err := o.Embed(context.Background(), seqs)
		if err != nil || !equalVec(got[0], fakeVector(seqs[0])) {
			t.Fatalf("Embed = %v, %v", got, err)
		}
	}
	if !o.Ready() || !o.Healthy() || o.PID() != pid || len(recordedArgs(t, records)) != 1 {
		t.Fatalf("Ready %v Healthy %v pid %d (was %d), %d workers started", o.Ready(), o.Healthy(), o.PID(), pid, len(recordedArgs(t, records)))
	}
}

func TestOnDemandStopsWhenIdleAndStartsAgain(t *testing.T) {
	const keepAlive = 300 * time.Millisecond
	o, records := newOnDemand(t, keepAlive)
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	seqs := [][]int32{{4, 5}, {6}}
	first, err := o.Embed(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	pid1 := o.PID()
	// Calls closer together than the keep-alive keep the worker.
	for range 3 {
		time.Sleep(keepAlive / 3)
		if _, err := o.Embed(context.Background(), seqs); err != nil || o.PID() != pid1 {
			t.Fatalf("Embed within the keep-alive: pid %d (was %d), %v", o.PID(), pid1, err)
		}
	}
	waitFor(t, "the idle worker is stopped", func() bool { return o.PID() == 0 })
	// PID says 0 only once the process has exited (/debug/vars and the pid gauge
	// read it).
	if !processGone(pid1) {
		t.Fatalf("PID is 0 while the stopped worker's process %d is still there", pid1)
	}
	if !o.Ready() || !o.Healthy() {
		t.Fatalf("a worker stopped for idleness: Ready %v Healthy %v; want both (it starts on demand)", o.Ready(), o.Healthy())
	}

	// Concurrent calls share one cold start and get the same vectors as before.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			got, err := o.Embed(context.Background(), seqs)
			if err == nil && (!equalVec(got[0], first[0]) || !equalVec(got[1], first[1])) {
				err = errors.New("vectors differ after the cold start")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	pid2 := o.PID()
	if n, took := o.Loads(); n != 1 || took <= 0 || pid2 == 0 || pid2 == pid1 || len(recordedArgs(t, records)) != 2 {
		t.Fatalf("after the cold start: %d loads (last %v), pid %d (was %d), %d workers started; want 1 load, a new pid, 2 workers",
			n, took, pid2, pid1, len(recordedArgs(t, records)))
	}

	// A caller that gives up waiting does not abandon the start for the others.
	waitFor(t, "the idle worker is stopped again", func() bool { return o.PID() == 0 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := o.Embed(ctx, seqs); !errors.Is(err, context.Canceled) {
		t.Fatalf("Embed with an ended context: %v", err)
	}
	if _, err := o.Embed(context.Background(), seqs); err != nil {
		t.Fatal(err)
	}
	if n, _ := o.Loads(); n != 2 {
		t.Fatalf("%d loads, want 2", n)
	}
}

// TestOnDemandCloseDuringColdStart: Close abandons a start after an idle stop; the
// call waiting for it fails as unavailable, and no worker is left (newOnDemand's
// cleanup checks every process the fakes recorded).
func TestOnDemandCloseDuringColdStart(t *testing.T) {
	w, _, records := newWarm(t, "FAKE_LOAD_DELAY=400ms")
	o := &OnDemand{Warm: w, KeepAlive: 50 * time.Millisecond, Logger: quietLogger()}
	t.Cleanup(func() { assertNoWorkersLeft(t, records) })
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle worker is stopped", func() bool { return o.PID() == 0 })
	errc := make(chan error, 1)
	go func() {
		_, err := o.Embed(context.Background(), [][]int32{{1}})
		errc <- err
	}()
	waitFor(t, "the cold start has begun", func() bool { return len(recordedArgs(t, records)) == 2 })
	if err := o.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the call waiting for the abandoned start: %v, want ErrUnavailable", err)
	}
	if o.Ready() || o.PID() != 0 {
		t.Fatalf("after Close: Ready %v, pid %d", o.Ready(), o.PID())
	}
}

// TestWarmFreshCopiesEverySetting: OnDemand starts Warm.Fresh copies, so a setting
// Fresh forgot would silently not apply to any worker of serve.
func TestWarmFreshCopiesEverySetting(t *testing.T) {
	w := &Warm{Spec: WorkerSpec{Path: "/bin/worker", Args: []string{"worker"}}, SocketDir: "/tmp/s", ReadyTimeout: 1, MinBackoff: 2,
		MaxBackoff: 3, StopTimeout: 4, Logger: quietLogger(), MinTokens: 5, NEmbd: 6, UnhealthyAfter: 7}
	v, f := reflect.ValueOf(w).Elem(), reflect.ValueOf(w.Fresh()).Elem()
	for i := range v.NumField() {
		field := v.Type().Field(i)
		if !field.IsExported() {
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("the test sets no value for Warm.%s; set one", field.Name)
		}
		if !reflect.DeepEqual(v.Field(i).Interface(), f.Field(i).Interface()) {
			t.Errorf("Warm.Fresh does not copy %s", field.Name)
		}
	}
}

package backends

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/embed-stack/embed-stack/telemetry/stage"
)

// Fleet runs the warm workers of the models one server serves (serve --model
// repeated), one [OnDemand] per model, as one: Start starts them all at once and
// fails as soon as one fails, abandoning the others' starts; Close stops them all.
// The server is Ready while every model takes requests, and Healthy while no
// model's worker has failed beyond recovery. Each model keeps its own keep-alive
// (OnDemand.KeepAlive), so that memory goes to the models in use, as Ollama's
// scheduler (server/sched.go) unloads a model once its keep_alive has passed.
//
// Set Models, call Start once and Close once; the other methods are safe for
// concurrent use.
type Fleet struct {
	// Models are in the server's order; the first is the default model, whose
	// worker's pid Vars reports without a model label.
	Models []FleetModel
}

// FleetModel is one model of a Fleet.
type FleetModel struct {
	// Name is the model's served name: the model label of its worker's spawns
	// (stage.WithModel), of its start error (ModelError) and of its Vars.
	Name string
	// Warm runs its warm worker.
	Warm *OnDemand
}

// ModelError is the failure of one model of a Fleet.
type ModelError struct {
	Model string
	Err   error
}

func (e *ModelError) Error() string { return fmt.Sprintf("model %s: %v", e.Model, e.Err) }
func (e *ModelError) Unwrap() error { return e.Err }

// Start starts every model's warm worker at once and returns when all are ready,
// or at the first failure, a *ModelError, once the other starts have been
// abandoned. Each start's context names its model (stage.WithModel), and so do
// the restarts and cold starts under it: their spawns count under the model's
// label.
func (f *Fleet) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(f.Models))
	for _, m := range f.Models {
		go func() {
			err := m.Warm.Start(stage.WithModel(ctx, m.Name))
			if err != nil {
				err = &ModelError{Model: m.Name, Err: err}
			}
			errs <- err
		}()
	}
	var first error
	for range f.Models {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// Close stops every model's warm worker, all at once.
func (f *Fleet) Close(ctx context.Context) error {
	errs := make([]error, len(f.Models))
	var wg sync.WaitGroup
	for i, m := range f.Models {
		wg.Go(func() { errs[i] = m.Warm.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Ready says every model takes requests (GET /ready); a model stopped by its
// keep-alive does, starting on the request.
func (f *Fleet) Ready() bool {
	for _, m := range f.Models {
		if !m.Warm.Ready() {
			return false
		}
	}
	return true
}

// Healthy says no model's warm worker has failed beyond recovery (GET /health).
func (f *Fleet) Healthy() bool {
	for _, m := range f.Models {
		if !m.Warm.Healthy() {
			return false
		}
	}
	return true
}

// Vars are the workers' figures for GET /debug/vars: the restarts and hang kills
// of all models together, the default model's worker pid, and per model its pid (0
// while stopped), restarts, hang kills and cold starts under "model/NAME/FIGURE"
// keys, so that every value stays a number, as the clients of /debug/vars read
// them.
func (f *Fleet) Vars() map[string]any {
	var restarts, kills int
	out := map[string]any{}
	for _, m := range f.Models {
		r, k := m.Warm.Restarts(), m.Warm.Kills()
		restarts, kills = restarts+r, kills+k
		loads, last := m.Warm.Loads()
		for key, v := range map[string]int64{"warm_worker_pid": int64(m.Warm.PID()), "worker_restarts": int64(r),
			"worker_hang_kills": int64(k), "cold_starts": int64(loads), "last_cold_start_ms": last.Milliseconds()} {
			out["model/"+m.Name+"/"+key] = v
		}
	}
	out["worker_restarts"], out["worker_hang_kills"] = restarts, kills
	if len(f.Models) > 0 {
		out["warm_worker_pid"] = f.Models[0].Warm.PID()
	}
	return out
}

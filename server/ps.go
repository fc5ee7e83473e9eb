package server

import (
	"math"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/ollamaapi"
)

// ModelLoad is one model's worker at a moment: whether it holds the model, and
// how long it has been idle. Models stopped by --keep-alive are not loaded; the
// next request loads them again.
type ModelLoad struct {
	Loaded bool
	PID    int
	// InFlight counts the worker calls in progress.
	InFlight int
	// IdleSince is when the last call ended, zero while calls are in flight.
	IdleSince time.Time
	// Expires is when --keep-alive stops the worker if no call comes; zero when
	// it never will.
	Expires time.Time
}

// PSModel is one row of GET /api/ps: Ollama's fields (name, model, size,
// digest, details, expires_at, size_vram), so that Ollama's clients and `ollama
// ps`-style tools read it, then embed-stack's own.
type PSModel struct {
	Name    string                 `json:"name"`
	Model   string                 `json:"model"`
	Size    int64                  `json:"size"`
	Digest  string                 `json:"digest"`
	Details ollamaapi.ModelDetails `json:"details"`
	// ExpiresAt is when --keep-alive stops the worker; without one, about 292
	// years ahead (Ollama's time for keep_alive -1, which `ollama ps` shows as
	// "Forever": a zero or absent time reads "Stopping...").
	ExpiresAt time.Time `json:"expires_at"`
	// SizeVRAM is Ollama's; embed-stack reports 0 (the workers' device memory is
	// not measured here).
	SizeVRAM int64  `json:"size_vram"`
	Task     string `json:"task"`
	PID      int    `json:"pid"`
	InFlight int    `json:"in_flight"`
	// IdleSeconds is how long no call has been in flight, to the millisecond;
	// absent while one is.
	IdleSeconds *float64 `json:"idle_seconds,omitempty"`
}

// PSResponse is the answer to GET /api/ps.
type PSResponse struct {
	Models []PSModel `json:"models"`
}

// ollamaPS serves GET /api/ps: the models whose worker is loaded right now, in
// --model order, as Ollama's `ollama ps` lists them, with their idle time (issue
// 27). A model unloaded by --keep-alive is left out, as Ollama leaves it out. The
// names are /api/tags' ("e:latest"), so that clients can match the two lists.
func (s *Server) ollamaPS(c *gin.Context) {
	now := time.Now()
	out := PSResponse{Models: []PSModel{}}
	for _, m := range s.registry() {
		load := ModelLoad{Loaded: true}
		if s.Loads != nil {
			load = s.Loads(m.ID)
		}
		if !load.Loaded {
			continue
		}
		info := s.modelInfo(m.ID)
		name := ollamaName(m.ID)
		row := PSModel{Name: name, Model: name, Details: ollamaDetails(info), Task: s.taskName(&m), PID: load.PID, InFlight: load.InFlight, ExpiresAt: load.Expires.UTC()}
		if load.Expires.IsZero() {
			row.ExpiresAt = now.Add(math.MaxInt64).UTC()
		}
		if info != nil {
			row.Size = info.File.Size
			if info.File.Digest != nil {
				row.Digest = info.File.Digest()
			}
		}
		if !load.IdleSince.IsZero() {
			idle := math.Round(now.Sub(load.IdleSince).Seconds()*1000) / 1000
			row.IdleSeconds = &idle
		}
		out.Models = append(out.Models, row)
	}
	c.JSON(http.StatusOK, out)
}

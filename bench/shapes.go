package bench

import (
	"fmt"
	"slices"
	"time"
)

// ShapeKind says how a shape drives a target.
type ShapeKind string

const (
	// KindRequest sends one request of fixed inputs after another.
	KindRequest ShapeKind = "request"
	// KindClients runs N clients, each sending single short queries back to back,
	// for a fixed time.
	KindClients ShapeKind = "clients"
	// KindInFlight sends short queries one after another while a long input is in
	// flight, after measuring the same queries on an idle server.
	KindInFlight ShapeKind = "in-flight"
	// KindReindex re-indexes a corpus of which most documents were embedded before:
	// an untimed priming pass sends the seen documents, then the whole corpus is
	// sent once, timed, and the vectors are compared across contenders (reindex.go).
	KindReindex ShapeKind = "reindex"
)

// Shape IDs that Goals reads.
const (
	ShapeShort     = "seed/short"
	ShapeTwo1k     = "seed/2x1k"
	ShapeLong      = "seed/long"
	ShapeShortLong = "seed/short+long"
	ShapeOverLimit = "seed/over-limit"
	ShapeInFlight  = "in-flight"
	ShapeReindex   = "reindex"
)

// GridShape is the ID of the grid cell of batch b and sequence length n.
func GridShape(b, n int) string { return fmt.Sprintf("grid/%dx%d", b, n) }

// ClientsShape is the ID of the concurrency level n.
func ClientsShape(n int) string { return fmt.Sprintf("clients/%d", n) }

// InFlightShape is the ID of the in-flight shape whose long input has n tokens
// (Plan.InFlightTokens); ShapeInFlight is the one of Plan.LongTokens.
func InFlightShape(n int) string { return fmt.Sprintf("in-flight/%d", n) }

// Shape is one workload.
type Shape struct {
	ID    string    `json:"id"`
	Kind  ShapeKind `json:"kind"`
	About string    `json:"about"`

	// Requests (KindRequest) holds one request per warm-up and repetition, in that
	// order; all of one shape have the same token counts but different texts, so no
	// target can answer from a cache.
	Requests [][]Input `json:"-"`
	Warmup   int       `json:"warmup"`
	Reps     int       `json:"reps"`
	// Expect is the HTTP status a correct server answers (0 means 200); any other
	// counts as an error.
	Expect int `json:"expect,omitempty"`
	// Contract shapes check embed-stack's own API contract (400 over the limit);
	// peers are not held to it and skip them.
	Contract bool `json:"contract,omitempty"`
	// ServersOnly shapes mean nothing for the in-process floor.
	ServersOnly bool `json:"servers_only,omitempty"`

	// Clients and Duration (KindClients): Pool's single-input requests are shared
	// out in turn. The floor, which has no clients, embeds the same queries Clients
	// at a time in one call: what perfect cross-request batching would reach.
	Clients  int           `json:"clients,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	Pool     []Input       `json:"-"`

	// Long (KindInFlight) is the input in flight; Idle short queries from Pool are
	// timed first with nothing else running, then queries are sent back to back
	// for at most Window while Long runs. A long input still running after Window
	// is cancelled.
	Long   Input         `json:"-"`
	Idle   int           `json:"idle,omitempty"`
	Window time.Duration `json:"window_ns,omitempty"`

	// Prime (KindReindex) holds the requests of the untimed priming pass: the
	// documents "seen before", in requests of the same size as Requests, which
	// then hold the whole corpus (seen and new documents interleaved) for the one
	// timed pass. Seen is the number of documents Prime sends.
	Prime [][]Input `json:"-"`
	Seen  int       `json:"seen,omitempty"`
}

// Tokens is the token count of one request of a KindRequest shape.
func (s *Shape) Tokens() int {
	if len(s.Requests) == 0 {
		return 0
	}
	n := 0
	for _, in := range s.Requests[0] {
		n += len(in.Tokens)
	}
	return n
}

// seqLen is the common length of a request shape's inputs, or 0 when they differ.
func (s *Shape) seqLen() int {
	if len(s.Requests) == 0 || len(s.Requests[0]) == 0 {
		return 0
	}
	n := len(s.Requests[0][0].Tokens)
	for _, in := range s.Requests[0] {
		if len(in.Tokens) != n {
			return 0
		}
	}
	return n
}

// Plan sizes the shapes of a run. The zero value of a field means the default in
// its comment.
type Plan struct {
	// ShortTokens is the seed's short text, a query (100).
	ShortTokens int
	// MediumTokens is the length of each of the seed's two documents (1024).
	MediumTokens int
	// LongTokens is the seed's long document (15000): over the warm worker's limit,
	// so embed-stack embeds it on an ephemeral worker.
	LongTokens int
	// OverLimitTokens is a document over the server's limit (32769).
	OverLimitTokens int
	// Batches and Lengths span the grid ({1, 8, 32} × {16, 128, 512, 2048}).
	Batches, Lengths []int
	// MaxGridTokens skips grid cells of more tokens per request (0: no limit);
	// on a small machine the largest cells alone would take most of a run.
	MaxGridTokens int
	// QueryTokens is the length of the clients' and the in-flight shape's short
	// queries (32).
	QueryTokens int
	// Clients are the concurrency levels ({1, 4, 16}) and ClientDuration each
	// level's time (10s).
	Clients        []int
	ClientDuration time.Duration
	// Warmup requests (1) and Reps (3) per request shape; HeavyTokens (2048) is the
	// request size from which HeavyReps (1) apply and warm-up is skipped.
	Warmup, Reps, HeavyReps, HeavyTokens int
	// ClientReps is the repetitions of each concurrency level (1).
	ClientReps int
	// InFlightIdle queries (10) are timed idle; then queries run for at most
	// InFlightWindow (15s) beside the long input.
	InFlightIdle   int
	InFlightWindow time.Duration
	// InFlightTokens are the lengths of further in-flight shapes' long inputs
	// ({4000, 8000}): documents under the warm limit, which the warm worker embeds
	// while the queries arrive (ShapeInFlight's goes to an ephemeral worker).
	InFlightTokens []int
	// Reindex adds the re-index shape (ShapeReindex), which a run leaves out
	// unless this is set or Only names it: it needs a second embed-stack server,
	// with the cache on (Session.CacheMiB), and its priming pass costs as much as
	// the timed one. ReindexDocs documents (1000) of ReindexTokens tokens (64),
	// ReindexSeenPercent of them (80) embedded before, sent in requests of
	// ReindexBatch (100).
	Reindex                                                      bool
	ReindexDocs, ReindexTokens, ReindexSeenPercent, ReindexBatch int
	// Skip lists shape IDs to leave out; Only, when not empty, the only ones to run.
	Skip, Only []string
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func (p Plan) withDefaults() Plan {
	p.ShortTokens = orInt(p.ShortTokens, 100)
	p.MediumTokens = orInt(p.MediumTokens, 1024)
	p.LongTokens = orInt(p.LongTokens, 15000)
	p.OverLimitTokens = orInt(p.OverLimitTokens, 32769)
	if p.Batches == nil {
		p.Batches = []int{1, 8, 32}
	}
	if p.Lengths == nil {
		p.Lengths = []int{16, 128, 512, 2048}
	}
	p.QueryTokens = orInt(p.QueryTokens, 32)
	if p.Clients == nil {
		p.Clients = []int{1, 4, 16}
	}
	if p.ClientDuration == 0 {
		p.ClientDuration = 10 * time.Second
	}
	p.Warmup = orInt(p.Warmup, 1)
	p.Reps = orInt(p.Reps, 3)
	p.HeavyReps = orInt(p.HeavyReps, 1)
	p.HeavyTokens = orInt(p.HeavyTokens, 2048)
	p.ClientReps = orInt(p.ClientReps, 1)
	p.InFlightIdle = orInt(p.InFlightIdle, 10)
	if p.InFlightWindow == 0 {
		p.InFlightWindow = 15 * time.Second
	}
	if p.InFlightTokens == nil {
		p.InFlightTokens = []int{4000, 8000}
	}
	p.ReindexDocs = orInt(p.ReindexDocs, 1000)
	p.ReindexTokens = orInt(p.ReindexTokens, 64)
	p.ReindexSeenPercent = orInt(p.ReindexSeenPercent, 80)
	p.ReindexBatch = orInt(p.ReindexBatch, 100)
	return p
}

// HasReindex says whether the plan runs the re-index shape, which needs a second
// embed-stack server with the cache on.
func (p Plan) HasReindex() bool {
	if slices.Contains(p.Skip, ShapeReindex) {
		return false
	}
	if len(p.Only) > 0 {
		return slices.Contains(p.Only, ShapeReindex)
	}
	return p.Reindex
}

// Shapes builds the run's shapes from c, in the order they run: the seed's table,
// the grid, the concurrency levels, the in-flight shapes, the re-index shape.
func (p Plan) Shapes(c *Corpus) ([]Shape, error) {
	p = p.withDefaults()
	skipped := map[string]bool{}
	for _, id := range p.Skip {
		skipped[id] = true
	}
	only := map[string]bool{}
	for _, id := range p.Only {
		only[id] = true
	}
	skip := func(id string) bool { return skipped[id] || len(only) > 0 && !only[id] }
	var shapes []Shape
	// request builds a request shape whose every request holds inputs made by mk.
	request := func(id, about string, mk func() ([]Input, error), tokens int, edit func(*Shape)) error {
		if skip(id) {
			return nil
		}
		s := Shape{ID: id, Kind: KindRequest, About: about, Warmup: p.Warmup, Reps: p.Reps}
		if tokens >= p.HeavyTokens {
			s.Warmup, s.Reps = 0, p.HeavyReps
		}
		if edit != nil {
			edit(&s)
		}
		for range s.Warmup + s.Reps {
			in, err := mk()
			if err != nil {
				return fmt.Errorf("shape %s: %w", id, err)
			}
			s.Requests = append(s.Requests, in)
		}
		shapes = append(shapes, s)
		return nil
	}
	one := func(mk func(int) (Input, error), n int) func() ([]Input, error) {
		return func() ([]Input, error) {
			in, err := mk(n)
			return []Input{in}, err
		}
	}
	steps := []error{
		request(ShapeShort, fmt.Sprintf("1 query of %d tokens", p.ShortTokens), one(c.Query, p.ShortTokens), p.ShortTokens, nil),
		request(ShapeTwo1k, fmt.Sprintf("2 documents of %d tokens", p.MediumTokens),
			func() ([]Input, error) { return c.Documents(2, p.MediumTokens) }, 2*p.MediumTokens, nil),
		request(ShapeLong, fmt.Sprintf("1 document of %d tokens", p.LongTokens), one(c.Document, p.LongTokens), p.LongTokens, nil),
		request(ShapeShortLong, fmt.Sprintf("1 query of %d tokens + 1 document of %d in one request", p.ShortTokens, p.LongTokens),
			func() ([]Input, error) {
				q, err := c.Query(p.ShortTokens)
				if err != nil {
					return nil, err
				}
				d, err := c.Document(p.LongTokens)
				return []Input{q, d}, err
			}, p.ShortTokens+p.LongTokens, nil),
		request(ShapeOverLimit, fmt.Sprintf("1 document of %d tokens, over the limit: must be refused with 400 before any work", p.OverLimitTokens),
			one(c.Document, p.OverLimitTokens), 0, func(s *Shape) {
				s.Expect, s.Contract, s.ServersOnly = 400, true, true
				s.Warmup, s.Reps = 0, max(1, p.Reps)
			}),
	}
	for _, err := range steps {
		if err != nil {
			return nil, err
		}
	}
	for _, b := range p.Batches {
		for _, n := range p.Lengths {
			if p.MaxGridTokens > 0 && b*n > p.MaxGridTokens {
				continue
			}
			if err := request(GridShape(b, n), fmt.Sprintf("%s of %d tokens", plural(b, "document"), n),
				func() ([]Input, error) { return c.Documents(b, n) }, b*n, nil); err != nil {
				return nil, err
			}
		}
	}
	pool, err := c.Queries(256, p.QueryTokens)
	if err != nil {
		return nil, fmt.Errorf("query pool: %w", err)
	}
	for _, n := range p.Clients {
		id := ClientsShape(n)
		if skip(id) {
			continue
		}
		shapes = append(shapes, Shape{
			ID: id, Kind: KindClients, Clients: n, Duration: p.ClientDuration, Reps: p.ClientReps, Pool: pool,
			About: fmt.Sprintf("%s sending single %d-token queries back to back for %s", plural(n, "client"), p.QueryTokens, p.ClientDuration),
		})
	}
	inFlight := []struct {
		id     string
		tokens int
	}{{ShapeInFlight, p.LongTokens}}
	for _, n := range p.InFlightTokens {
		inFlight = append(inFlight, struct {
			id     string
			tokens int
		}{InFlightShape(n), n})
	}
	for _, f := range inFlight {
		if skip(f.id) {
			continue
		}
		long, err := c.Document(f.tokens)
		if err != nil {
			return nil, fmt.Errorf("shape %s: %w", f.id, err)
		}
		shapes = append(shapes, Shape{
			ID: f.id, Kind: KindInFlight, ServersOnly: true, Reps: 1,
			Pool: pool, Long: long, Idle: p.InFlightIdle, Window: p.InFlightWindow,
			About: fmt.Sprintf("%d-token queries one after another while a %d-token document is in flight (at most %s), against the same queries idle",
				p.QueryTokens, f.tokens, p.InFlightWindow),
		})
	}
	if p.HasReindex() {
		s, err := p.reindexShape(c)
		if err != nil {
			return nil, fmt.Errorf("shape %s: %w", ShapeReindex, err)
		}
		shapes = append(shapes, s)
	}
	return shapes, nil
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

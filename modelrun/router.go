package modelrun

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// Router returns a router over the model's tokenizer and workers with the given
// limits; Dim is the model's native dimension whatever c says.
func (m *Model) Router(c routing.Config) *routing.Router {
	c.Dim, c.Pooling = m.Facts.Dim, m.Facts.Pooling.String()
	c.Rerank, c.CrossEncoder = m.Facts.Rerank, m.Facts.CrossEncoder
	c.Prompts, c.Frame = m.Prompts, m.Frame
	c.MaxInputTokens, c.WarmMaxTokens = m.MaxInput, m.WarmMax
	// Queries go to the warm worker beside a batch of documents in flight, which
	// it interrupts for them (backends.ShortJobs).
	info := m.Warm.Info
	if m.WarmInfo != nil {
		info = m.WarmInfo
	}
	c.ShortCalls = func(seqs [][]int32) bool { return info().ShortJobs.Fits(seqs) }
	return &routing.Router{
		Config:    c,
		Tokenizer: m.Tokenizer,
		Cl100k:    &lazyCl100k{},
		Warm:      WarmBackend{m.Warm},
		Long:      longBackend{m.Long},
	}
}

// WarmBackend adapts a warm worker to routing.Backend, translating its
// unavailability into routing's, so that package server maps it to 503 without
// knowing about processes.
type WarmBackend struct{ W WarmEmbedder }

// WarmEmbedder is a warm worker: *backends.Warm, or the *backends.OnDemand over it.
type WarmEmbedder interface {
	Embed(ctx context.Context, seqs [][]int32) ([][]float32, error)
}

// Embed embeds seqs on the warm worker.
func (b WarmBackend) Embed(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	v, err := b.W.Embed(ctx, seqs)
	return v, translate(err)
}

// longBackend adapts the ephemeral spawner to routing.SingleBackend.
type longBackend struct{ e *backends.Ephemeral }

func (b longBackend) Embed(ctx context.Context, seq []int32) ([]float32, error) {
	v, err := b.e.Embed(ctx, seq)
	return v, translate(err)
}

func translate(err error) error {
	var ue *backends.UnavailableError
	if errors.As(err, &ue) {
		return &routing.UnavailableError{RetryAfter: ue.RetryAfter, Err: err}
	}
	return err
}

// lazyCl100k loads the cl100k_base vocabulary on first use: it costs memory and
// start-up time that servers which never see token-id inputs should not pay.
type lazyCl100k struct {
	once sync.Once
	dec  *tokenizer.Cl100k
	err  error
}

func (l *lazyCl100k) Decode(ids []int64) (string, error) {
	l.once.Do(func() { l.dec, l.err = tokenizer.NewCl100k() })
	if l.err != nil {
		return "", fmt.Errorf("load cl100k_base: %w", l.err)
	}
	return l.dec.Decode(ids)
}

// Package ledger counts the model usage of one top-level run by provider
// and model: every model call made under the run's context, at any depth
// and in background work, adds to it. The AG-UI handler reports it as
// RUN_FINISHED's usage, one entry per provider and model.
package ledger

import (
	"context"
	"sync"

	"github.com/deputy-go/deputy/provider"
)

// Entry is the usage of one provider and model.
type Entry struct {
	// Provider is the provider's name (provider.Namer), or "" when it has
	// none.
	Provider string
	// Model is the model that answered, or "" when nobody said.
	Model string
	Usage provider.Usage
}

// Ledger is the usage of one run. It is safe for concurrent use: the
// children of a fan-out add to it from their own goroutines.
type Ledger struct {
	mu      sync.Mutex
	entries []Entry // in the order each provider and model first appeared
}

type key struct{}

// With returns ctx carrying a new ledger, and the ledger.
func With(ctx context.Context) (context.Context, *Ledger) {
	l := &Ledger{}
	return context.WithValue(ctx, key{}, l), l
}

// Add adds u, spent by one call to model of providerName, to the ledger of
// ctx. Without a ledger, or for a call that cost nothing (an answer
// replayed from a journal), it does nothing.
func Add(ctx context.Context, providerName, model string, u provider.Usage) {
	l, _ := ctx.Value(key{}).(*Ledger)
	if l == nil || u.IsZero() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.entries {
		if e := &l.entries[i]; e.Provider == providerName && e.Model == model {
			e.Usage = e.Usage.Add(u)
			return
		}
	}
	l.entries = append(l.entries, Entry{Provider: providerName, Model: model, Usage: u})
}

// Entries returns the ledger's entries, one per provider and model, in the
// order they first spent.
func (l *Ledger) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Entry(nil), l.entries...)
}

// Total returns the sum of the entries.
func (l *Ledger) Total() provider.Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var u provider.Usage
	for _, e := range l.entries {
		u = u.Add(e.Usage)
	}
	return u
}

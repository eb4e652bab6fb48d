// Package stored puts a store.Journal under a journal.Scope: the one place
// where the journal's scopes, which the tool package consults, meet the
// storage that keeps them.
package stored

import (
	"context"

	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/store"
)

// log is a store.Journal as a journal.Log.
type log struct{ j *store.Journal }

func (l log) Turn() string { return l.j.Turn() }

func (l log) Lookup(key string) (journal.Entry, bool) {
	e, ok := l.j.Lookup(key)
	return journal.Entry(e), ok
}

func (l log) Keys(prefix string) []string { return l.j.Keys(prefix) }

func (l log) Record(ctx context.Context, key string, e journal.Entry) error {
	return l.j.Record(ctx, key, store.Entry(e))
}

func (l log) Start(key string, e journal.Entry) func(context.Context) error {
	return l.j.Start(key, store.Entry(e))
}

// New returns the top-level scope of j.
func New(j *store.Journal) *journal.Scope { return journal.New(log{j}) }

// Store returns the store that keeps the scope's journal, or nil when the
// journal is kept elsewhere.
func Store(s *journal.Scope) *store.Store {
	if l, ok := s.J.(log); ok {
		return l.j.Store()
	}
	return nil
}

package agent

import (
	"context"
	"fmt"

	"github.com/deputy-go/deputy/provider"
)

// Checkpoint returns a cheap function that puts the conversation back as it
// is now, undoing other callers' runs too: a shared agent's caller holds its
// turn instead (Hold, Turn.Rollback).
func (r *React) Checkpoint() (restore func()) {
	r.mu.Lock()
	saved := r.kept
	r.mu.Unlock()
	return func() { r.putBack(saved) }
}

// Turn is a React's turn held by one caller (Hold): runs under Hold's
// context follow one another with no other run between them. A Turn is for
// one goroutine; call Release when done.
type Turn struct {
	r        *React
	saved    kept
	released bool
}

// heldKey is the context key of the Turn a caller holds.
type heldKey struct{}

// Hold waits for the agent's turn (until ctx ends) and keeps it until
// Release: runs under the returned context, one at a time and through any
// wrapper, take it, so that a caller's several runs (a retried sub-agent
// call) are one call whose Rollback undoes them and nothing else.
func (r *React) Hold(ctx context.Context) (context.Context, *Turn, error) {
	if err := r.turn.Acquire(ctx, 1); err != nil {
		return ctx, nil, fmt.Errorf("agent %q: waiting for the previous run to end: %w", r.name, err)
	}
	r.mu.Lock()
	saved := r.kept
	r.mu.Unlock()
	t := &Turn{r: r, saved: saved}
	return context.WithValue(ctx, heldKey{}, t), t, nil
}

// Rollback puts the conversation back as it was when the turn was taken
// (after Release, it does nothing).
func (t *Turn) Rollback() {
	if t.released {
		return
	}
	t.r.putBack(t.saved)
}

// putBack makes k, taken earlier, the conversation again. A run since may
// have written past its end, so the next run copies it.
func (r *React) putBack(k kept) {
	k.spare = false
	r.mu.Lock()
	k.epoch = r.newEpoch()
	r.kept = k
	r.mu.Unlock()
}

// Release gives the turn up; later calls do nothing.
func (t *Turn) Release() {
	if !t.released {
		t.released = true
		t.r.turn.Release(1)
	}
}

// History returns a copy of the conversation kept between runs.
func (r *React) History() []provider.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Message(nil), r.kept.msgs...)
}

// Reset forgets the conversation. It waits for a run in progress to end.
func (r *React) Reset() {
	_ = r.turn.Acquire(context.Background(), 1)
	defer r.turn.Release(1)
	r.mu.Lock()
	r.kept = kept{epoch: r.newEpoch()}
	r.mu.Unlock()
}

// trimHistory bounds msgs to about limit messages, cutting only where a user
// turn starts.
func trimHistory(msgs []provider.Message, limit int) []provider.Message {
	if limit <= 0 || len(msgs) <= limit {
		return msgs
	}
	cut := len(msgs) - limit
	for i := cut; i < len(msgs); i++ {
		if msgs[i].Role == provider.RoleUser {
			return msgs[i:]
		}
	}
	for i := cut - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleUser {
			return msgs[i:]
		}
	}
	return msgs
}

package agent

import (
	"context"

	"github.com/deputy-go/deputy/internal/run"
)

// WithThread returns ctx as part of the conversation thread named thread,
// the same for every turn of one conversation and no other (agui names each
// stored thread with its owner); PerThread experts (subagent) keep one each.
func WithThread(ctx context.Context, thread string) context.Context {
	return run.WithThread(ctx, thread)
}

// Thread returns the thread ctx is part of (WithThread), or "".
func Thread(ctx context.Context) string { return run.Thread(ctx) }

// WithOwner returns ctx acting for owner, the caller a served endpoint named
// (agui's Authorize, a2a's), which a policy reads (policy.Check.Owner).
func WithOwner(ctx context.Context, owner string) context.Context {
	return run.WithOwner(ctx, owner)
}

// Owner returns the owner ctx acts for (WithOwner), or "".
func Owner(ctx context.Context) string { return run.Owner(ctx) }

package agent

import "context"

type threadKey struct{}

// WithThread returns ctx as part of the conversation thread named thread:
// a name that is the same for every turn of one conversation and
// different for every other, across users (agui's handler gives each run
// of a stored thread its owner's and thread's name). Resident experts
// scoped per thread (subagent.PerThread) keep one conversation for each.
func WithThread(ctx context.Context, thread string) context.Context {
	return context.WithValue(ctx, threadKey{}, thread)
}

// Thread returns the thread ctx is part of (WithThread), or "".
func Thread(ctx context.Context) string {
	s, _ := ctx.Value(threadKey{}).(string)
	return s
}

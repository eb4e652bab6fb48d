// Package agentname carries the name of the agent whose run a context
// belongs to, below the agent package: the fake provider routes its
// scripted replies by that name without importing agent, so fake depends
// on provider alone.
package agentname

import "context"

// Key is the context key under which the agent package keeps the run a
// context belongs to.
type Key struct{}

// Named is what the agent package keeps under Key.
type Named interface {
	// AgentName returns the name of the agent of the run.
	AgentName() string
}

// From returns the name of the agent whose run ctx belongs to, or "" outside
// a run. It is agent.Name.
func From(ctx context.Context) string {
	if n, ok := ctx.Value(Key{}).(Named); ok {
		return n.AgentName()
	}
	return ""
}

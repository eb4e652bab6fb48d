// Package rerun carries, from the viewer's re-run of a turn
// (devui.WithRerun) to the agent it runs and the sub-agent tool of the
// call it goes on from, where the re-run goes on from: what the turn had
// spent before that point, which counts against the lead's token and cost
// limits (Spent), and the turn of a sub-agent to go on from inside its
// call (Call).
package rerun

import (
	"context"
	"sync/atomic"

	"github.com/deputy-go/deputy/provider"
)

type spentKey struct{}

type spent struct {
	tokens  int64
	dollars float64
}

// WithSpent returns ctx for a run that goes on with a turn that had spent
// tokens and dollars before the point it goes on from: the first run
// started under it (the lead) counts them as used against its limits.
func WithSpent(ctx context.Context, tokens int64, dollars float64) context.Context {
	return context.WithValue(ctx, spentKey{}, &spent{tokens: tokens, dollars: dollars})
}

// TakeSpent returns what WithSpent put in ctx, and ctx without it, so
// that the runs started under the one that takes it do not count it again.
func TakeSpent(ctx context.Context) (context.Context, int64, float64) {
	s, _ := ctx.Value(spentKey{}).(*spent)
	if s == nil {
		return ctx, 0, 0
	}
	return context.WithValue(ctx, spentKey{}, (*spent)(nil)), s.tokens, s.dollars
}

type callKey struct{}

type call struct {
	id, tool string
	after    []provider.Message
	taken    atomic.Bool
}

// WithCall returns ctx for a lead whose call id to the sub-agent tool
// named tool is left open, to be run again from inside: the sub-agent
// goes on from after, its turns up to the call it is re-run from.
func WithCall(ctx context.Context, id, tool string, after []provider.Message) context.Context {
	return context.WithValue(ctx, callKey{}, &call{id: id, tool: tool, after: after})
}

// Call reports whether the call id to the sub-agent tool named tool, made
// at depth, is the one WithCall named, and returns where it goes on from:
// the lead's call (depth 0), once.
func Call(ctx context.Context, id, tool string, depth int) ([]provider.Message, bool) {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil || depth != 0 || c.id != id || c.tool != tool || !c.taken.CompareAndSwap(false, true) {
		return nil, false
	}
	return c.after, true
}

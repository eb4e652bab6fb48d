package run

import (
	"context"

	"github.com/deputy-go/deputy/event"
	"go.opentelemetry.io/otel/trace"
)

// Observe records em and span, the event sink and the span of ctx, a
// run's own context as Start returned it, for Observers: the agent loop,
// which looked both up before it started the run, records them when a
// policy binds the run, which records each of its decisions there. It does
// nothing for any other context.
func Observe(ctx context.Context, em event.Emitter, span trace.Span) {
	ri, _ := ctx.Value(key{}).(*info)
	if ri == nil || ri.scope == nil || ri.scope.ctx != ctx || span == nil {
		return
	}
	ri.scope.em, ri.scope.span = em, span
}

// Observers returns the depth of ctx, and, when ctx is a run's own
// context and Observe recorded them, its event sink and span (ok). For
// any other context, a run's step's or call's or one with a sink or a
// span layered on the run's, ok is false: its sink and span are looked
// up (event.From, trace.SpanFromContext).
//
// A policy records each decision on the sink and the span of the
// context it is made in, a run's model calls in the run's own: looking
// them up, walking the whole context in vain when events and tracing
// were off, was about a twentieth of what the policy cost in
// BenchmarkDelegationPolicyRatio (the scope keeps them in the padding of
// its size class: no byte more a run).
func Observers(ctx context.Context) (depth int, em event.Emitter, span trace.Span, ok bool) {
	ri, _ := ctx.Value(key{}).(*info)
	if ri == nil {
		return 0, em, nil, false
	}
	if sc := ri.scope; sc != nil && sc.span != nil && sc.ctx == ctx {
		return int(ri.depth), sc.em, sc.span, true
	}
	return int(ri.depth), em, nil, false
}

// A Bound is a policy (package policy, which keeps its *Policy in
// Policy) that binds a context and every run started under it: a run
// inherits the Bound of the context it starts under (Start), and every
// layer this package adds copies it, so that the policy of a run's step
// or call is found with the run's other values (BoundOf), in the nearest
// layer, where a context layer of its own sat under every run of the tree
// and every look-up of anything else walked through it.
type Bound struct {
	Policy any
	// Narrows returns an error (a *policy.Widening) when own, a
	// *policy.Policy, would allow what Policy forbids.
	Narrows func(own any) error
	// Scrub returns a text as the policy's redactors leave it, nil when
	// the policy has none: what a sub-agent tool shows of a child's answer
	// or failure in its events, which go out before the result is checked.
	Scrub func(string) string
}

// Scrub returns s as the redactors of the policy binding ctx leave it
// (Bound.Scrub), s itself when none binds it or it redacts nothing.
func Scrub(ctx context.Context, s string) string {
	if b := BoundOf(ctx); b != nil && b.Scrub != nil {
		return b.Scrub(s)
	}
	return s
}

// WithBound returns ctx bound by b, in a layer of its own.
func WithBound(ctx context.Context, b *Bound) context.Context {
	ri := from(ctx)
	ri.bound = b
	return context.WithValue(ctx, key{}, &ri)
}

// BoundOf returns the Bound of ctx, nil when none binds it.
func BoundOf(ctx context.Context) *Bound {
	if ri, ok := ctx.Value(key{}).(*info); ok {
		return ri.bound
	}
	return nil
}

// Bind makes b bind the run of ctx, a run's own context as Start returned
// it, in place of the Bound it inherited: the agent loop calls it, before
// it derives any context from ctx, when the run's agent has a policy of
// its own (which b holds with the one inherited). It does nothing for any
// other context.
func Bind(ctx context.Context, b *Bound) {
	if ri, _ := ctx.Value(key{}).(*info); ri != nil && ri.scope != nil && ri.scope.ctx == ctx {
		ri.scope.info.bound = b
	}
}

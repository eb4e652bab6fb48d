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
		return ri.depth, sc.em, sc.span, true
	}
	return ri.depth, em, nil, false
}

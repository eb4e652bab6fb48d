package temporal

import (
	"context"

	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
)

// tracer is the tracer of the activities this worker runs under ctx: the
// Runtime's TracerProvider's, or, without one, that of a recording span in
// ctx (the span the tracing interceptor of go.temporal.io/sdk/contrib/
// opentelemetry starts for each activity); nil when neither is there.
func (rt *Runtime) tracer(ctx context.Context) trace.Tracer {
	tp := rt.TracerProvider
	if tp == nil {
		sp := trace.SpanFromContext(ctx)
		if !sp.IsRecording() {
			return nil
		}
		tp = sp.TracerProvider()
	}
	return tp.Tracer(agent.TracerName, trace.WithSchemaURL(semconv.SchemaURL))
}

// startCheck starts the span of the policy's decisions about call (its
// hand-off, or its answer), when the activity is traced and there is a
// policy: each decision is a span event on it.
func (a *Activities) startCheck(ctx context.Context, call provider.ToolCall) (context.Context, func()) {
	tr := a.rt.tracer(ctx)
	if tr == nil || a.rt.Policy == nil {
		return ctx, func() {}
	}
	ctx, span := tr.Start(ctx, "check "+call.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		semconv.GenAIToolName(call.Name),
		semconv.GenAIToolCallID(call.ID),
	))
	return ctx, func() { span.End() }
}

package agent

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/internal/spans"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// TracerName is the instrumentation scope of deputy's spans.
const TracerName = "github.com/deputy-go/deputy"

// Attributes deputy adds to its spans, so that a trace joins the event
// stream: a run's subtree tokens over its whole turn (Output.TotalUsage),
// the part earlier runs of it spent (Output.Earlier), and, under prices, the
// cost and what the cache saved (Output.CacheSaved) of a call or a subtree.
const (
	AttrRunID               = attribute.Key("deputy.run.id")
	AttrSubagentRunID       = attribute.Key("deputy.subagent.run.id") // the subagentRunId of the run's events
	AttrSubtreeInputTokens  = attribute.Key("deputy.subtree.input_tokens")
	AttrSubtreeOutputTokens = attribute.Key("deputy.subtree.output_tokens")
	AttrEarlierInputTokens  = attribute.Key("deputy.earlier.input_tokens")
	AttrEarlierOutputTokens = attribute.Key("deputy.earlier.output_tokens")
	AttrCost                = attribute.Key("deputy.cost.usd")
	AttrCacheSaved          = attribute.Key("deputy.cache.saved.usd") // negative when cache writes cost more than reads saved
	AttrMessageID           = attribute.Key("deputy.message.id")      // on a model call's link to the send of a message its step took
)

// WithTracerProvider traces runs with OpenTelemetry, by the gen_ai
// conventions: a span per run ("invoke_agent <name>"), model call ("chat
// <model>") and tool call ("execute_tool <tool>", a sub-agent's run span
// under it), with gen_ai.usage.* what the span itself paid for, the Attr keys,
// gen_ai.provider.name (a provider.Namer), gen_ai.conversation.id (the
// thread), and error.type on failure. Without it, a run is traced under a
// recording span in its context; a nil tp turns it off. See docs/events.md.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(r *React) error {
		r.tracer = nil
		if tp != nil {
			r.tracer = tp.Tracer(TracerName, trace.WithSchemaURL(semconv.SchemaURL))
		}
		return nil
	}
}

// tracerFor returns the tracer of a run under ctx, or nil when the run is
// not traced, and the span of ctx when it looked it up (nil when not).
func (r *React) tracerFor(ctx context.Context) (trace.Tracer, trace.Span) {
	if r.tracer != nil {
		return r.tracer, nil
	}
	sp := trace.SpanFromContext(ctx)
	if sp.IsRecording() {
		return sp.TracerProvider().Tracer(TracerName, trace.WithSchemaURL(semconv.SchemaURL)), sp
	}
	return nil, sp
}

// modeler is a provider that names its default model, as the openai and
// anthropic providers do.
type modeler interface{ Model() string }

// spanIdentity is what the spans of one agent say about its provider.
func (r *React) spanIdentity() (providerName, model string) {
	if n, ok := r.p.(provider.Namer); ok {
		providerName = n.Name()
	}
	model = r.model
	if m, ok := r.p.(modeler); ok && model == "" {
		model = m.Model()
	}
	return providerName, model
}

// common adds the attributes every run and chat span of ctx carries.
func common(ctx context.Context, attrs []attribute.KeyValue, providerName string) []attribute.KeyValue {
	if providerName != "" {
		attrs = append(attrs, semconv.GenAIProviderNameKey.String(providerName))
	}
	if thread := event.ThreadID(ctx); thread != "" {
		attrs = append(attrs, semconv.GenAIConversationID(thread))
	}
	return attrs
}

func startRunSpan(ctx context.Context, tr trace.Tracer, r *React, runID string) (context.Context, trace.Span) {
	providerName, model := r.spanIdentity()
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIAgentName(r.name),
		AttrRunID.String(runID),
	}
	if model != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(model))
	}
	if sub := event.SubagentRunID(ctx); sub != "" {
		attrs = append(attrs, AttrSubagentRunID.String(sub))
	}
	attrs = common(ctx, attrs, providerName)
	return tr.Start(ctx, "invoke_agent "+r.name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// endRunSpan ends a run's span with its outcome; replayed is the part of
// out.Usage the run replayed from its turn's journal.
func endRunSpan(span trace.Span, out Output, replayed provider.Usage, err error) {
	all := out.TotalUsage()
	span.SetAttributes(
		semconv.GenAIUsageInputTokens(int(out.Usage.InputTokens-replayed.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(out.Usage.OutputTokens-replayed.OutputTokens)),
		AttrSubtreeInputTokens.Int64(all.InputTokens), AttrSubtreeOutputTokens.Int64(all.OutputTokens),
	)
	if e := out.Earlier; !e.IsZero() {
		span.SetAttributes(AttrEarlierInputTokens.Int64(e.InputTokens), AttrEarlierOutputTokens.Int64(e.OutputTokens))
	}
	if out.Cost > 0 {
		span.SetAttributes(AttrCost.Float64(out.Cost))
	}
	if out.CacheSaved != 0 {
		span.SetAttributes(AttrCacheSaved.Float64(out.CacheSaved))
	}
	if err != nil {
		spans.Fail(span, err, errcode.Of(err))
	}
	span.End()
}

// startChatSpan starts the span of a model call, linked to the spans the
// messages its request delivered were sent under (links).
func startChatSpan(ctx context.Context, tr trace.Tracer, model, providerName string, links []trace.Link) (context.Context, trace.Span) {
	return spans.StartChat(ctx, tr, model, providerName, event.ThreadID(ctx), links)
}

// toolSpans wraps each tool call of a traced run in an execute_tool span.
type toolSpans struct{ tr trace.Tracer }

func (t toolSpans) hook(ctx context.Context, c tool.Call) (context.Context, func(tool.Result, error)) {
	return spans.StartTool(ctx, t.tr, c)
}

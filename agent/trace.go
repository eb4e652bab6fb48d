package agent

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// TracerName is the instrumentation scope of deputy's spans.
const TracerName = "github.com/deputy-go/deputy"

// Attributes deputy adds to its spans beside the gen_ai semantic
// conventions, so that a trace can be joined with the event stream.
const (
	// AttrRunID is the run id of an invoke_agent span (Output.RunID).
	AttrRunID = attribute.Key("deputy.run.id")
	// AttrSubagentRunID is the sub-agent invocation an invoke_agent span
	// runs for (the subagentRunId of its events), when it is one.
	AttrSubagentRunID = attribute.Key("deputy.subagent.run.id")
)

// WithTracerProvider traces the agent's runs with OpenTelemetry, following
// the gen_ai semantic conventions:
//
//   - a span per run, "invoke_agent <name>", with gen_ai.operation.name,
//     gen_ai.agent.name, the run id (AttrRunID) and, at its end,
//     gen_ai.usage.input_tokens and gen_ai.usage.output_tokens of the run,
//     its sub-agents' included;
//   - a span per model call, "chat <model>" (or "chat" when the model is
//     the provider's default), with gen_ai.request.model,
//     gen_ai.response.model, gen_ai.response.finish_reasons and the usage;
//   - a span per tool call, "execute_tool <tool>", with gen_ai.tool.name and
//     gen_ai.tool.call.id. Each call of a turn has its own span, also when
//     the calls run in parallel, and the tool runs in its context: a
//     sub-agent's run span is a child of the span of the call that started
//     it.
//
// A failed run, model call or tool call records the error on its span and
// sets its status to Error, with error.type.
//
// An agent without this option is still traced when the context of its run
// carries a recording span: it uses that span's TracerProvider. That is how
// sub-agents are traced when only the top-level agent has the option. With
// neither, tracing costs a context lookup per run. A nil tp turns the
// option off.
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
// not traced.
func (r *React) tracerFor(ctx context.Context) trace.Tracer {
	if r.tracer != nil {
		return r.tracer
	}
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		return sp.TracerProvider().Tracer(TracerName, trace.WithSchemaURL(semconv.SchemaURL))
	}
	return nil
}

func startRunSpan(ctx context.Context, tr trace.Tracer, name, runID string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIAgentName(name),
		AttrRunID.String(runID),
	}
	if sub := event.SubagentRunID(ctx); sub != "" {
		attrs = append(attrs, AttrSubagentRunID.String(sub))
	}
	return tr.Start(ctx, "invoke_agent "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

func endRunSpan(span trace.Span, out Output, err error) {
	u := out.TotalUsage()
	span.SetAttributes(semconv.GenAIUsageInputTokens(int(u.InputTokens)), semconv.GenAIUsageOutputTokens(int(u.OutputTokens)))
	if err != nil {
		recordError(span, err, ErrorCode(err))
	}
	span.End()
}

func startChatSpan(ctx context.Context, tr trace.Tracer, model string) (context.Context, trace.Span) {
	name := "chat"
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat}
	if model != "" {
		name += " " + model
		attrs = append(attrs, semconv.GenAIRequestModel(model))
	}
	return tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

func endChatSpan(span trace.Span, resp provider.Response, err error) {
	if resp.Model != "" {
		span.SetAttributes(semconv.GenAIResponseModel(resp.Model))
	}
	if resp.StopReason != "" {
		span.SetAttributes(semconv.GenAIResponseFinishReasons(string(resp.StopReason)))
	}
	if !resp.Usage.IsZero() {
		span.SetAttributes(semconv.GenAIUsageInputTokens(int(resp.Usage.InputTokens)), semconv.GenAIUsageOutputTokens(int(resp.Usage.OutputTokens)))
	}
	if err != nil {
		recordError(span, err, ErrorCode(err))
	}
	span.End()
}

// toolSpans wraps each tool call of a traced run in an execute_tool span.
type toolSpans struct{ tr trace.Tracer }

func (t toolSpans) hook(ctx context.Context, c tool.Call) (context.Context, func(tool.Result, error)) {
	ctx, span := t.tr.Start(ctx, "execute_tool "+c.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(c.Name),
		semconv.GenAIToolCallID(c.ID),
		semconv.GenAIToolType("function"),
	))
	return ctx, func(res tool.Result, err error) {
		switch {
		case err != nil:
			recordError(span, err, ErrorCode(err))
		case res.IsError:
			// A failure the model reads: the call failed, the run goes on.
			cause := res.Err
			if cause == nil {
				cause = toolError(res.Content)
			}
			recordError(span, cause, "tool_error")
		}
		span.End()
	}
}

type toolError string

func (e toolError) Error() string { return string(e) }

func recordError(span trace.Span, err error, kind string) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorTypeKey.String(kind))
}

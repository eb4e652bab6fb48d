// Package spans starts and ends the OpenTelemetry spans of a model call and
// of a tool call, by the gen_ai conventions, for every place deputy makes
// one: an agent's run in process and a worker's activities on Temporal.
package spans

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Attributes of deputy's own that a call's span carries.
const (
	Cost       = attribute.Key("deputy.cost.usd")
	CacheSaved = attribute.Key("deputy.cache.saved.usd") // negative when cache writes cost more than reads saved
)

// StartChat starts the span of a model call to model (when named) of
// providerName (when named) in thread (when one), linked to links.
func StartChat(ctx context.Context, tr trace.Tracer, model, providerName, thread string, links []trace.Link) (context.Context, trace.Span) {
	name := "chat"
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat}
	if model != "" {
		name += " " + model
		attrs = append(attrs, semconv.GenAIRequestModel(model))
	}
	if providerName != "" {
		attrs = append(attrs, semconv.GenAIProviderNameKey.String(providerName))
	}
	if thread != "" {
		attrs = append(attrs, semconv.GenAIConversationID(thread))
	}
	return tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...), trace.WithLinks(links...))
}

// EndChat ends a model call's span with its reply or error, and, when
// priced, what it cost (dollars) and what the cache saved.
func EndChat(span trace.Span, resp provider.Response, err error, dollars, saved float64, priced bool) {
	if priced && err == nil {
		span.SetAttributes(Cost.Float64(dollars))
		if u := resp.Usage; u.CacheReadTokens != 0 || u.CacheWriteTokens != 0 {
			span.SetAttributes(CacheSaved.Float64(saved))
		}
	}
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
		Fail(span, err, errcode.Of(err))
	}
	span.End()
}

// StartTool starts the span of tool call c, and returns the function that
// ends it with the call's result or error.
func StartTool(ctx context.Context, tr trace.Tracer, c tool.Call) (context.Context, func(tool.Result, error)) {
	ctx, span := tr.Start(ctx, "execute_tool "+c.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(c.Name),
		semconv.GenAIToolCallID(c.ID),
		semconv.GenAIToolType("function"),
	))
	return ctx, func(res tool.Result, err error) {
		switch {
		case err != nil:
			Fail(span, err, errcode.Of(err))
		case res.IsError:
			// A failure the model reads: the call failed, the run goes on.
			cause := res.Err
			if cause == nil {
				cause = toolError(res.Content)
			}
			Fail(span, cause, "tool_error")
		}
		span.End()
	}
}

type toolError string

func (e toolError) Error() string { return string(e) }

// Fail records err on span, of kind (error.type).
func Fail(span trace.Span, err error, kind string) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorTypeKey.String(kind))
}

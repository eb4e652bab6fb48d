package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// WithLogger logs to l, with the agent's name and run id: at Debug each model
// call, tool call and run's end; at Warn a failed model call and a tool error
// only the model reads. nil, the default, costs nothing. Sub-agents log when
// given it too (subagent.WithReactOptions).
func WithLogger(l *slog.Logger) Option {
	return func(r *React) error {
		r.logger = l
		return nil
	}
}

// logModelCall logs one model call that took d.
func (s *runState) logModelCall(step int, resp provider.Response, d time.Duration, err error) {
	l := s.r.logger
	ctx := s.ctx
	if err != nil {
		if l.Enabled(ctx, slog.LevelWarn) {
			l.LogAttrs(ctx, slog.LevelWarn, "deputy: model call failed", s.attrs(
				slog.Int("step", step), slog.Duration("duration", d), slog.Any("error", err))...)
		}
		return
	}
	if l.Enabled(ctx, slog.LevelDebug) {
		l.LogAttrs(ctx, slog.LevelDebug, "deputy: model call", s.attrs(
			slog.Int("step", step), slog.String("model", resp.Model),
			slog.Int64("input_tokens", resp.Usage.InputTokens), slog.Int64("output_tokens", resp.Usage.OutputTokens),
			slog.Int("tool_calls", len(resp.Message.ToolCalls)), slog.Duration("duration", d))...)
	}
}

// logToolCalls logs the results of one step's tool calls, which took d
// together.
func (s *runState) logToolCalls(step int, calls []provider.ToolCall, results []tool.Result, d time.Duration) {
	l := s.r.logger
	ctx := s.ctx
	for i, res := range results {
		if i >= len(calls) {
			break
		}
		level := slog.LevelDebug
		msg := "deputy: tool call"
		if res.IsError {
			level, msg = slog.LevelWarn, "deputy: tool call failed; the model reads why"
		}
		if !l.Enabled(ctx, level) {
			continue
		}
		attrs := s.attrs(slog.Int("step", step), slog.String("tool", calls[i].Name), slog.String("call_id", calls[i].ID),
			slog.Duration("step_tools_duration", d))
		if res.IsError {
			attrs = append(attrs, slog.String("error", res.Content))
		}
		l.LogAttrs(ctx, level, msg, attrs...)
	}
}

// logEnd logs the end of the run.
func (s *runState) logEnd(steps int, d time.Duration, err error) {
	l := s.r.logger
	if !l.Enabled(context.WithoutCancel(s.ctx), slog.LevelDebug) {
		return
	}
	attrs := s.attrs(slog.Int("steps", steps), slog.Int64("tokens", s.usage.Tokens()), slog.Int64("child_tokens", s.child.Tokens()),
		slog.Duration("duration", d))
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	l.LogAttrs(context.WithoutCancel(s.ctx), slog.LevelDebug, "deputy: run finished", attrs...)
}

func (s *runState) attrs(more ...slog.Attr) []slog.Attr {
	return append([]slog.Attr{slog.String("agent", s.r.name), slog.String("run_id", s.runID)}, more...)
}

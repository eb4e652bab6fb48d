package policy_test

import (
	"context"
	"testing"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A decision is recorded on the sink and the span of the context it is
// made in, however that context was layered: the sink and span a run
// recorded for its own context, and its steps' and calls' (run.Observe,
// run.Observers), are not those of a context with a sink or a span added
// on the run's context, its step's or its call's, or between them (a tool
// call hook's span, a sub-agent's event scope), nor are they taken for
// those of another context the same Check is decided in afterwards.
func TestDecisionsRecordedWhereTheyAreMade(t *testing.T) {
	p, err := policy.New(policy.DenyTools("no-shell", policy.AnyDepth, "shell"))
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")

	// The run's own context has neither a sink nor a span, and says so.
	var runSink sink
	base := event.WithSink(context.Background(), &runSink)
	lead := run.Start(base, "run_1", "lead", 0)
	run.Observe(lead, event.From(base), trace.SpanFromContext(base))
	calls := []provider.ToolCall{{ID: "c1", Name: "shell"}}
	step := func(ctx context.Context) context.Context {
		s, _ := run.AtStep(ctx, run.Step{N: 1, Calls: calls})
		return s
	}
	call := func(ctx context.Context) context.Context { return run.AtCall(ctx, "c1") }

	withSink := func(ctx context.Context, s *sink) context.Context { return event.WithSink(ctx, s) }

	for _, c := range []struct {
		name string
		ctx  func(*sink) context.Context
	}{
		{"sink on the run", func(s *sink) context.Context { return withSink(lead, s) }},
		{"sink on the step", func(s *sink) context.Context { return withSink(step(lead), s) }},
		{"sink on the call", func(s *sink) context.Context { return withSink(call(step(lead)), s) }},
		{"sink between the run and the step", func(s *sink) context.Context { return call(step(withSink(lead, s))) }},
		{"sink between the step and the call", func(s *sink) context.Context { return call(withSink(step(lead), s)) }},
		{"sink above a call's run", func(s *sink) context.Context {
			child := run.Start(withSink(call(step(lead)), s), "run_2", "child", 0)
			return call(step(child))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s sink
			ctx := c.ctx(&s)
			chk := &policy.Check{Point: policy.BeforeTool, Tool: "shell"}
			if out := p.Decide(ctx, chk); out.Verdict != policy.Deny {
				t.Fatalf("%+v", out)
			}
			if len(s.got) != 1 {
				t.Errorf("%d decisions on the sink added, want 1", len(s.got))
			}
		})
	}
	if len(runSink.got) != 0 {
		t.Errorf("%d decisions on the run's sink, under the sinks added", len(runSink.got))
	}

	// The run's own context, its step's and its call's record where the
	// run said, on the sink it had; so does a Check decided under one of
	// them and then under another.
	chk := &policy.Check{Point: policy.BeforeTool, Tool: "shell"}
	for _, ctx := range []context.Context{lead, step(lead), call(step(lead))} {
		p.Decide(ctx, chk)
	}
	if len(runSink.got) != 3 {
		t.Errorf("%d decisions on the run's sink, want 3", len(runSink.got))
	}
	var moved sink
	p.Decide(withSink(call(step(lead)), &moved), chk)
	if len(moved.got) != 1 || len(runSink.got) != 3 {
		t.Errorf("a Check decided again under a context with its own sink: %d events there, %d on the run's", len(moved.got), len(runSink.got))
	}

	// Spans, likewise: one on the run, the step or the call, or between.
	spans := map[string]func() context.Context{
		"span on the run":  func() context.Context { ctx, _ := tracer.Start(lead, "on the run"); return ctx },
		"span on the step": func() context.Context { ctx, _ := tracer.Start(step(lead), "on the step"); return ctx },
		"span on the call": func() context.Context { ctx, _ := tracer.Start(call(step(lead)), "on the call"); return ctx },
		"span between the run and the step": func() context.Context {
			ctx, _ := tracer.Start(lead, "between the run and the step")
			return call(step(ctx))
		},
		"span between the step and the call": func() context.Context {
			ctx, _ := tracer.Start(step(lead), "between the step and the call")
			return call(ctx)
		},
	}
	for _, mk := range spans {
		ctx := mk()
		p.Decide(ctx, &policy.Check{Point: policy.BeforeTool, Tool: "shell"})
		trace.SpanFromContext(ctx).End()
	}
	ended := rec.Ended()
	if len(ended) != len(spans) {
		t.Fatalf("%d spans ended, want %d", len(ended), len(spans))
	}
	for _, sp := range ended {
		n := 0
		for _, e := range sp.Events() {
			if e.Name == policy.EventName {
				n++
			}
		}
		if n != 1 {
			t.Errorf("span %q: %d decisions, want 1", sp.Name(), n)
		}
	}
}

package agent_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

func newRecorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func byName(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestTraceSpansOfARun(t *testing.T) {
	rec, tp := newRecorder(t)
	p := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{Name: "weather", Arguments: []byte(`{"city":"Lisbon"}`)},
			provider.ToolCall{Name: "weather", Arguments: []byte(`{"city":"Porto"}`)},
		),
		fake.Text("Sunny in both."),
	)
	a, err := agent.NewReact(p, agent.WithName("assistant"), agent.WithModel("small"),
		agent.WithTools(weatherToolFor(t)), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Run(context.Background(), agent.Input{Text: "weather?"})
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	runs := byName(spans, "invoke_agent assistant")
	chats := byName(spans, "chat small")
	tools := byName(spans, "execute_tool weather")
	if len(runs) != 1 || len(chats) != 2 || len(tools) != 2 || len(spans) != 5 {
		for _, s := range spans {
			t.Log(s.Name())
		}
		t.Fatalf("got %d spans: want one run, two chats, two tool calls", len(spans))
	}
	run := runs[0]
	ra := attrs(run)
	if ra["gen_ai.operation.name"].AsString() != "invoke_agent" || ra["gen_ai.agent.name"].AsString() != "assistant" ||
		ra["deputy.run.id"].AsString() != out.RunID {
		t.Errorf("run span attributes: %v", ra)
	}
	u := out.TotalUsage()
	if ra["gen_ai.usage.input_tokens"].AsInt64() != u.InputTokens || ra["gen_ai.usage.output_tokens"].AsInt64() != u.OutputTokens {
		t.Errorf("run span usage %v/%v, want %v", ra["gen_ai.usage.input_tokens"], ra["gen_ai.usage.output_tokens"], u)
	}
	for _, c := range chats {
		ca := attrs(c)
		if c.Parent().SpanID() != run.SpanContext().SpanID() {
			t.Error("a chat span is not a child of the run span")
		}
		if ca["gen_ai.operation.name"].AsString() != "chat" || ca["gen_ai.request.model"].AsString() != "small" ||
			ca["gen_ai.response.model"].AsString() != "fake" || ca["gen_ai.usage.input_tokens"].AsInt64() == 0 {
			t.Errorf("chat span attributes: %v", ca)
		}
		if c.SpanKind() != trace.SpanKindClient {
			t.Errorf("chat span kind %v", c.SpanKind())
		}
	}
	ids := map[string]bool{}
	for _, s := range tools {
		ta := attrs(s)
		if s.Parent().SpanID() != run.SpanContext().SpanID() {
			t.Error("a tool span is not a child of the run span")
		}
		if ta["gen_ai.operation.name"].AsString() != "execute_tool" || ta["gen_ai.tool.name"].AsString() != "weather" {
			t.Errorf("tool span attributes: %v", ta)
		}
		ids[ta["gen_ai.tool.call.id"].AsString()] = true
	}
	if len(ids) != 2 || ids[""] {
		t.Errorf("tool call ids on the spans: %v", ids)
	}
}

func TestTraceRecordsErrors(t *testing.T) {
	rec, tp := newRecorder(t)
	failing := tool.Func{Def: tool.Definition{Name: "flaky"}, Fn: func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{}, tool.Correctable(errors.New("try later"))
	}}
	boom := errors.New("model down")
	p := fake.NewProvider(fake.Call("flaky", `{}`), fake.Error(boom))
	a, err := agent.NewReact(p, agent.WithTools(failing), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(context.Background(), agent.Input{Text: "go"}); !errors.Is(err, boom) {
		t.Fatalf("run error %v", err)
	}
	for _, name := range []string{"invoke_agent agent", "execute_tool flaky"} {
		spans := byName(rec.Ended(), name)
		if len(spans) != 1 {
			t.Fatalf("%d spans named %q", len(spans), name)
		}
		s := spans[0]
		if s.Status().Code != codes.Error || len(s.Events()) == 0 || s.Events()[0].Name != "exception" {
			t.Errorf("%s: status %v, events %v: want the error recorded", name, s.Status(), s.Events())
		}
		if attrs(s)["error.type"].AsString() == "" {
			t.Errorf("%s: no error.type", name)
		}
	}
	chats := byName(rec.Ended(), "chat")
	if len(chats) != 2 || chats[1].Status().Code != codes.Error {
		t.Errorf("the failed model call's span: %v", chats)
	}
}

// An agent without a tracer of its own is traced under a recording span,
// and not at all otherwise.
func TestTraceInheritedFromTheContext(t *testing.T) {
	rec, tp := newRecorder(t)
	a, err := agent.NewReact(fake.NewProvider(fake.Text("hi").For("agent"), fake.Text("hi again").For("agent")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(context.Background(), agent.Input{Text: "x"}); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("an untraced run made %d spans", n)
	}
	ctx, root := tp.Tracer("test").Start(context.Background(), "request")
	if _, err := a.Run(ctx, agent.Input{Text: "x"}); err != nil {
		t.Fatal(err)
	}
	root.End()
	runs := byName(rec.Ended(), "invoke_agent agent")
	if len(runs) != 1 || runs[0].Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("want one run span under the caller's span, got %v", runs)
	}
}

func BenchmarkRunUntraced(b *testing.B) {
	p := fake.NewProvider(fake.Text("hi")).Loop().DontRecord()
	a, err := agent.NewReact(p, agent.WithHistoryLimit(2))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Run(ctx, agent.Input{Text: "x"}); err != nil {
			b.Fatal(err)
		}
	}
}

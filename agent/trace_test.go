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
	"github.com/deputy-go/deputy/event"
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
	u := out.Usage
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

// named is a provider that names itself and its default model, as the
// openai and anthropic providers do.
type named struct{ *fake.Provider }

func (named) Name() string  { return "acme" }
func (named) Model() string { return "big" }

// Spans follow the gen_ai conventions: the provider's name on run and chat
// spans, the model on the run span, the thread as the conversation id, and
// each span's gen_ai.usage its own, so that summing the run spans (or the
// chat spans) counts every token once; a run's subtree total is under
// deputy.subtree.*.
func TestTraceGenAIConventions(t *testing.T) {
	rec, tp := newRecorder(t)
	p := named{fake.NewProvider(
		fake.Call("ask", `{}`).For("lead").WithUsage(u(100, 10)),
		fake.Text("Child says hi.").For("lead").WithUsage(u(200, 20)),
		fake.Text("hi").For("child").WithUsage(u(1000, 100)),
	)}
	child := newReact(t, p, agent.WithName("child"), agent.WithModel("small"))
	ask := toolFunc("ask", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		out, err := child.Run(ctx, agent.Input{Text: "hi"})
		return tool.Result{Content: out.Answer, Usage: out.TotalUsage()}, err
	})
	lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(ask), agent.WithTracerProvider(tp))
	ctx := event.WithThread(context.Background(), "thread-7")
	out, err := lead.Run(ctx, agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	leadRun, childRun := byName(spans, "invoke_agent lead"), byName(spans, "invoke_agent child")
	if len(leadRun) != 1 || len(childRun) != 1 {
		t.Fatalf("%d lead and %d child run spans, want one each", len(leadRun), len(childRun))
	}
	tests := []struct {
		span           sdktrace.ReadOnlySpan
		model          string
		own, subtreeIn int64
	}{
		{leadRun[0], "big", 300, 1300},
		{childRun[0], "small", 1000, 1000},
	}
	for _, tt := range tests {
		a := attrs(tt.span)
		if a["gen_ai.provider.name"].AsString() != "acme" || a["gen_ai.request.model"].AsString() != tt.model ||
			a["gen_ai.conversation.id"].AsString() != "thread-7" {
			t.Errorf("%s: attributes %v: want provider acme, model %s, conversation thread-7", tt.span.Name(), a, tt.model)
		}
		if a["gen_ai.usage.input_tokens"].AsInt64() != tt.own || a["deputy.subtree.input_tokens"].AsInt64() != tt.subtreeIn {
			t.Errorf("%s: input tokens %v own, %v subtree; want %d and %d", tt.span.Name(),
				a["gen_ai.usage.input_tokens"], a["deputy.subtree.input_tokens"], tt.own, tt.subtreeIn)
		}
	}
	var runs, chats int64
	for _, s := range spans {
		a := attrs(s)
		switch a["gen_ai.operation.name"].AsString() {
		case "invoke_agent":
			runs += a["gen_ai.usage.input_tokens"].AsInt64()
		case "chat":
			chats += a["gen_ai.usage.input_tokens"].AsInt64()
			if a["gen_ai.provider.name"].AsString() != "acme" || a["gen_ai.conversation.id"].AsString() != "thread-7" {
				t.Errorf("%s: attributes %v: want provider acme and conversation thread-7", s.Name(), a)
			}
		}
	}
	if total := out.TotalUsage().InputTokens; runs != total || chats != total {
		t.Errorf("input tokens summed over run spans %d, over chat spans %d; want the run's total %d in both", runs, chats, total)
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

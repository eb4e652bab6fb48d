package subagent_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
)

func spanAttr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// Each of two children run in parallel is traced under the execute_tool
// span of the call that started it; only the top-level agent has a tracer.
func TestTraceNestsParallelChildren(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	p := fake.NewProvider(
		twoCalls("researcher", "topic A", "topic B").For("lead"),
		fake.Text("Both topics are settled.").For("lead"),
	)
	for range 4 {
		p.Add(fake.Respond(researcherReply).For("researcher"))
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(researcherTool(t, p)), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	events := &eventcheck.Recorder{}
	if _, err := lead.Run(event.WithSink(context.Background(), events), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
	}
	parent := func(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan { return byID[s.Parent().SpanID().String()] }

	var leadRun sdktrace.ReadOnlySpan
	var childRuns []sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.Name() {
		case "invoke_agent lead":
			leadRun = s
		case "invoke_agent researcher":
			childRuns = append(childRuns, s)
		}
	}
	if leadRun == nil || len(childRuns) != 2 {
		t.Fatalf("runs: lead %v, children %d", leadRun != nil, len(childRuns))
	}
	calls := map[string]bool{}
	subs := map[string]bool{}
	for _, c := range childRuns {
		call := parent(c)
		if call == nil || call.Name() != "execute_tool researcher" || parent(call) != leadRun {
			t.Fatalf("a child's run span hangs under %v, want an execute_tool span of the lead's run", call)
		}
		calls[spanAttr(call, "gen_ai.tool.call.id")] = true
		subs[spanAttr(c, "deputy.subagent.run.id")] = true
		// The child's own work nests under its run.
		var chats, tools int
		for _, s := range spans {
			if parent(s) == c {
				switch s.Name() {
				case "chat":
					chats++
				case "execute_tool search":
					tools++
				}
			}
		}
		if chats != 2 || tools != 1 {
			t.Errorf("child run has %d chat and %d search spans, want 2 and 1", chats, tools)
		}
	}
	if len(calls) != 2 {
		t.Errorf("the children hang under %d distinct tool calls, want 2", len(calls))
	}
	// The trace and the events name the same invocations.
	for id := range children(events.Events()) {
		if !subs[id] {
			t.Errorf("sub-agent %s of the events has no run span", id)
		}
	}
}

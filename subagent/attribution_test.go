package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// researcherReply scripts a child that searches once, then reports on the
// topic of its task; a task naming "fail" makes its model fail instead.
func researcherReply(ctx context.Context, req provider.Request) (provider.Response, error) {
	task := req.Messages[0].Content
	if strings.Contains(task, "fail") {
		return provider.Response{}, errors.New("the source timed out")
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != provider.RoleTool {
		return provider.Response{Message: provider.AssistantMessage("",
			provider.ToolCall{Name: "search", Arguments: json.RawMessage(`{"query":"x"}`)}), StopReason: provider.StopToolUse}, nil
	}
	return provider.Response{Message: provider.AssistantMessage("Report on " + task + "."), StopReason: provider.StopEndTurn}, nil
}

func searchTool(t testing.TB) tool.Tool {
	type args struct {
		Query string `json:"query"`
	}
	s, err := tool.New("search", "Searches.", func(ctx context.Context, in args) (string, error) { return "found " + in.Query, nil })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// researcherTool is a FromFactory tool whose children are ReAct agents on p.
func researcherTool(t testing.TB, p provider.Provider, opts ...subagent.Option) *subagent.SubAgentTool {
	t.Helper()
	reg, err := tool.NewRegistry(searchTool(t))
	if err != nil {
		t.Fatal(err)
	}
	r, err := subagent.FromFactory("researcher", "Researches one topic.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("researcher"), agent.WithRegistry(reg))
		}, append([]subagent.Option{subagent.WithInputFromArgs(taskText)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func taskText(args json.RawMessage) (agent.Input, error) {
	var a struct {
		Task string `json:"task"`
	}
	err := json.Unmarshal(args, &a)
	return agent.Input{Text: a.Task}, err
}

func twoCalls(name, a, b string) fake.Reply {
	return fake.Calls(
		provider.ToolCall{Name: name, Arguments: json.RawMessage(`{"task":"` + a + `"}`)},
		provider.ToolCall{Name: name, Arguments: json.RawMessage(`{"task":"` + b + `"}`)},
	).Saying("I will ask two researchers.")
}

func checkStream(t *testing.T, events []event.Event, opt eventcheck.Options) {
	t.Helper()
	if problems := eventcheck.Check(events, opt); len(problems) > 0 {
		t.Fatalf("the stream does not conform:\n%s\n\nevents:\n%s", strings.Join(problems, "\n"), dump(events))
	}
}

func dump(events []event.Event) string {
	var b strings.Builder
	for _, e := range events {
		j, _ := json.Marshal(e)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// children groups events by the sub-agent they are attributed to.
func children(events []event.Event) map[string][]event.Event {
	out := map[string][]event.Event{}
	for _, e := range events {
		if e.SubagentRunID != "" {
			out[e.SubagentRunID] = append(out[e.SubagentRunID], e)
		}
	}
	return out
}

func TestAttributionOfParallelChildren(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := fake.NewProvider(
		twoCalls("researcher", "topic A", "topic B").For("lead"),
		fake.Text("Both topics are settled.").For("lead"),
	)
	for range 4 {
		p.Add(fake.Respond(researcherReply).For("researcher"))
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(researcherTool(t, p)))
	if err != nil {
		t.Fatal(err)
	}
	rec := &eventcheck.Recorder{}
	out, err := lead.Run(event.WithSink(context.Background(), rec), agent.Input{Text: "research two topics"})
	if err != nil {
		t.Fatal(err)
	}
	events := rec.Events()
	checkStream(t, events, eventcheck.Options{})

	kids := children(events)
	if len(kids) != 2 {
		t.Fatalf("%d sub-agents in the stream, want 2", len(kids))
	}
	calls := map[string]bool{} // the lead's tool calls
	for _, e := range events {
		if e.Type == event.ToolCallStart && e.SubagentRunID == "" {
			calls[e.ToolCallID] = true
		}
	}
	for id, evs := range kids {
		start, end := evs[0], evs[len(evs)-1]
		if start.Type != event.SubagentStarted || start.Name != "researcher" || start.Description != "Researches one topic." ||
			!calls[start.ParentToolCallID] || start.ParentSubagentRunID != "" {
			t.Errorf("sub-agent %s starts with %+v", id, start)
		}
		if end.Type != event.SubagentFinished || !strings.HasPrefix(string(end.Result), `"Report on topic `) {
			t.Errorf("sub-agent %s ends with %+v", id, end)
		}
		// The child's own events: one step with a search call, one with
		// the report.
		var types []string
		for _, e := range evs[1 : len(evs)-1] {
			types = append(types, string(e.Type))
		}
		want := "STEP_STARTED TOOL_CALL_START TOOL_CALL_ARGS TOOL_CALL_ARGS TOOL_CALL_END TOOL_CALL_RESULT STEP_FINISHED " +
			"STEP_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_CONTENT TEXT_MESSAGE_CONTENT TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END STEP_FINISHED"
		if got := strings.Join(types, " "); got != want {
			t.Errorf("sub-agent %s:\n got %s\nwant %s", id, got, want)
		}
	}
	// Whatever is not attributed is the lead's own: its steps and messages
	// carry its run id.
	for _, e := range events {
		if e.SubagentRunID != "" {
			continue
		}
		name := e.StepName + e.MessageID
		if name != "" && !strings.HasPrefix(name, out.RunID+"/") {
			t.Errorf("unattributed %s %q is not the lead's", e.Type, name)
		}
	}
}

func TestAttributionOfNestedChildren(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := fake.NewProvider(
		fake.Call("manager", `{"task":"organise"}`).For("lead"),
		fake.Text("Done.").For("lead"),
		fake.Call("researcher", `{"task":"topic C"}`).For("manager"),
		fake.Text("Organised.").For("manager"),
	)
	for range 2 {
		p.Add(fake.Respond(researcherReply).For("researcher"))
	}
	res := researcherTool(t, p, subagent.WithMaxDepth(2))
	manager, err := subagent.FromFactory("manager", "Organises research.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("manager"), agent.WithTools(res))
		}, subagent.WithMaxDepth(2))
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(manager))
	if err != nil {
		t.Fatal(err)
	}
	rec := &eventcheck.Recorder{}
	if _, err := lead.Run(event.WithSink(context.Background(), rec), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	events := rec.Events()
	checkStream(t, events, eventcheck.Options{})
	var starts []event.Event
	for _, e := range events {
		if e.Type == event.SubagentStarted {
			starts = append(starts, e)
		}
	}
	if len(starts) != 2 {
		t.Fatalf("%d SUBAGENT_STARTED, want 2", len(starts))
	}
	mgr, wrk := starts[0], starts[1]
	if mgr.ParentSubagentRunID != "" || wrk.ParentSubagentRunID != mgr.SubagentRunID {
		t.Errorf("the worker's parent sub-agent is %q, want the manager %q", wrk.ParentSubagentRunID, mgr.SubagentRunID)
	}
	// The worker's spawning call is the manager's: attributed to it.
	for _, e := range events {
		if e.Type == event.ToolCallStart && e.ToolCallID == wrk.ParentToolCallID && e.SubagentRunID != mgr.SubagentRunID {
			t.Errorf("the worker's tool call is attributed to %q", e.SubagentRunID)
		}
	}
}

func TestAttributionOfAFailingChild(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := fake.NewProvider(
		twoCalls("researcher", "topic A", "fail B").For("lead"),
		fake.Text("One topic is settled.").For("lead"),
	)
	for range 3 {
		p.Add(fake.Respond(researcherReply).For("researcher"))
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(researcherTool(t, p)))
	if err != nil {
		t.Fatal(err)
	}
	rec := &eventcheck.Recorder{}
	if _, err := lead.Run(event.WithSink(context.Background(), rec), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	events := rec.Events()
	checkStream(t, events, eventcheck.Options{})
	var failed []event.Event
	for _, e := range events {
		if e.Type == event.SubagentError {
			failed = append(failed, e)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0].Message, "the source timed out") || failed[0].Code == "" {
		t.Fatalf("SUBAGENT_ERROR events: %+v", failed)
	}
}

// A background job that is still running when the parent answers is
// cancelled by the run's end, and closes before RUN_FINISHED.
func TestAttributionOfBackgroundJobs(t *testing.T) {
	defer goleak.VerifyNone(t)
	started := make(chan struct{})
	p := fake.NewProvider(
		fake.Call(subagent.SpawnToolName, `{"task":"a long task","background":true}`).For("lead"),
		// The lead answers once the job's child is at work, without waiting
		// for it.
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			<-started
			return provider.Response{Message: provider.AssistantMessage("Started it; not waiting.")}, nil
		}).For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			close(started)
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}).For(subagent.DefaultForkName),
	)
	reg, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(p, reg, subagent.WithBackground())
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(sp); err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	rec := &eventcheck.Recorder{}
	if _, err := lead.Run(event.WithSink(context.Background(), rec), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	events := rec.Events()
	problems := eventcheck.Check(events, eventcheck.Options{})
	// A background child outlives the tool call that started it: the call's
	// result (the job receipt) comes before the child ends. That is the one
	// rule of the harness a background job cannot keep.
	var other []string
	for _, p := range problems {
		if !strings.Contains(p, "while its sub-agent") {
			other = append(other, p)
		}
	}
	if len(other) > 0 {
		t.Fatalf("the stream does not conform:\n%s\n%s", strings.Join(other, "\n"), dump(events))
	}
	var ends []event.Event
	for _, e := range events {
		if e.Type == event.SubagentFinished || e.Type == event.SubagentError {
			ends = append(ends, e)
		}
	}
	if len(ends) != 1 || ends[0].Type != event.SubagentError || ends[0].Code != "cancelled" {
		t.Fatalf("the job's sub-agent ended with %+v, want one SUBAGENT_ERROR (cancelled)", ends)
	}
	if last := events[len(events)-1]; last.Type != event.RunFinished {
		t.Fatalf("last event %s", last.Type)
	}
}

// The resident expert keeps one agent, but each consultation is an
// invocation of its own.
func TestAttributionOfAResidentExpert(t *testing.T) {
	p := fake.NewProvider(
		fake.Call("expert", `{"task":"q1"}`).For("lead"),
		fake.Call("expert", `{"task":"q2"}`).For("lead"),
		fake.Text("Answered.").For("lead"),
		fake.Text("a1").For("expert"),
		fake.Text("a2").For("expert"),
	)
	resident, err := agent.NewReact(p, agent.WithName("expert"))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := subagent.FromAgent("expert", "Knows things.", resident)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(ex))
	if err != nil {
		t.Fatal(err)
	}
	rec := &eventcheck.Recorder{}
	if _, err := lead.Run(event.WithSink(context.Background(), rec), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	events := rec.Events()
	checkStream(t, events, eventcheck.Options{})
	if n := len(children(events)); n != 2 {
		t.Fatalf("%d invocations, want 2 (one per call)", n)
	}
}

// A sink that is slow, or none at all, does not change what a run returns.
func TestAttributionSinkDoesNotChangeTheRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	run := func(ctx context.Context) agent.Output {
		p := fake.NewProvider(
			twoCalls("researcher", "topic A", "topic B").For("lead"),
			fake.Text("Both topics are settled.").For("lead"),
		)
		for range 4 {
			p.Add(fake.Respond(researcherReply).For("researcher"))
		}
		lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(researcherTool(t, p)))
		if err != nil {
			t.Fatal(err)
		}
		out, err := lead.Run(ctx, agent.Input{Text: "research two topics"})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var n atomic.Int64
	slow := event.SinkFunc(func(event.Event) { n.Add(1); time.Sleep(time.Millisecond) })
	without := run(context.Background())
	with := run(event.WithSink(context.Background(), slow))
	if n.Load() == 0 {
		t.Fatal("the slow sink saw nothing")
	}
	if without.Answer != with.Answer || without.TotalUsage() != with.TotalUsage() || len(without.Messages) != len(with.Messages) {
		t.Errorf("the sink changed the run:\nwithout %v %v\nwith    %v %v", without.Answer, without.TotalUsage(), with.Answer, with.TotalUsage())
	}
	for i := range without.Messages {
		a, b := without.Messages[i], with.Messages[i]
		if a.Role != b.Role || a.Content != b.Content || len(a.ToolCalls) != len(b.ToolCalls) {
			t.Errorf("message %d differs: %+v vs %+v", i, a, b)
		}
	}
}

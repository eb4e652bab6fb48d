package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// checkPairing checks that every invocation's events open with
// SUBAGENT_STARTED and close with one SUBAGENT_FINISHED or SUBAGENT_ERROR,
// with all of the invocation's other events in between, and that no
// run-level event is attributed to an invocation. It returns the STARTED
// events in order.
func checkPairing(t *testing.T, events []event.Event) []event.Event {
	t.Helper()
	state := map[string]string{} // run id → "open" or "closed"
	var started []event.Event
	for i, e := range events {
		id := e.SubagentRunID
		if id == "" {
			continue
		}
		if e.Type.RunLevel() {
			t.Errorf("event %d: %s attributed to sub-agent run %s", i, e.Type, id)
		}
		switch e.Type {
		case event.SubagentStarted:
			if state[id] != "" {
				t.Errorf("event %d: run id %s started twice", i, id)
			}
			state[id] = "open"
			started = append(started, e)
		case event.SubagentFinished, event.SubagentError:
			if state[id] != "open" {
				t.Errorf("event %d: %s for run %s, which is %q", i, e.Type, id, state[id])
			}
			state[id] = "closed"
		default:
			if state[id] != "open" {
				t.Errorf("event %d: %s of run %s outside its STARTED..FINISHED", i, e.Type, id)
			}
		}
	}
	for id, s := range state {
		if s != "closed" {
			t.Errorf("sub-agent run %s never ended", id)
		}
	}
	return started
}

// Every invocation gets a fresh run id, opens with SUBAGENT_STARTED
// naming the parent's tool call and closes with SUBAGENT_FINISHED.
func TestEventsPerInvocation(t *testing.T) {
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			p := fake.NewProvider(
				fake.Calls(
					provider.ToolCall{Name: "child", Arguments: json.RawMessage(`{"task":"one"}`)},
					provider.ToolCall{Name: "child", Arguments: json.RawMessage(`{"task":"two"}`)},
				).For("lead"),
				fake.Call("child", `{"task":"three"}`).For("lead"),
				fake.Text("done").For("lead"),
				fake.Text("answer").For("child"),
			).Loop()
			var mu sync.Mutex
			var renderIDs []string
			sub := f.build(t, p, nil, WithRender(func(_ context.Context, o Outcome) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				renderIDs = append(renderIDs, o.RunID)
				return o.Output.Answer, nil
			}))
			lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(sub), agent.WithMaxSteps(3))
			var rec recorder
			out, err := lead.Run(rec.context(context.Background()), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			all := rec.all()
			started := checkPairing(t, all)

			var callIDs []string
			for _, m := range out.Messages {
				for _, c := range m.ToolCalls {
					callIDs = append(callIDs, c.ID)
				}
			}
			var ids, parents []string
			for _, e := range started {
				ids = append(ids, e.SubagentRunID)
				parents = append(parents, e.ParentToolCallID)
				if e.Name != "child" || e.Description != sub.Definition().Description || e.ParentSubagentRunID != "" {
					t.Errorf("STARTED = %+v", e)
				}
			}
			slices.Sort(callIDs)
			slices.Sort(parents)
			if diff := cmp.Diff(callIDs, parents); diff != "" {
				t.Errorf("parentToolCallId of the invocations (-lead's calls +events):\n%s", diff)
			}
			if len(ids) != 3 || ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] {
				t.Errorf("run ids %v, want three distinct", ids)
			}
			slices.Sort(ids)
			slices.Sort(renderIDs)
			if diff := cmp.Diff(ids, renderIDs); diff != "" {
				t.Errorf("Outcome.RunID differs from the events' (-events +outcomes):\n%s", diff)
			}
			for _, e := range rec.subagentEvents() {
				if e.Type == event.SubagentFinished && string(e.Result) != `"answer"` {
					t.Errorf("FINISHED result = %s, want the tool result as a JSON string", e.Result)
				}
			}
			// The child's model output is attributed to its invocation; the
			// lead's own run events are not attributed at all.
			var childText, leadRuns int
			for _, e := range all {
				if e.Type == event.TextMessageContent && e.Delta == "answer" && slices.Contains(ids, e.SubagentRunID) {
					childText++
				}
				if e.Type == event.RunStarted || e.Type == event.RunFinished {
					leadRuns++
				}
			}
			if childText != 3 || leadRuns != 2 {
				t.Errorf("%d attributed child texts (want 3), %d run events (want the lead's 2)", childText, leadRuns)
			}
		})
	}
}

// A failed invocation closes with SUBAGENT_ERROR, its message the
// error's and its code the kind of failure.
func TestErrorEvents(t *testing.T) {
	tests := []struct {
		name     string
		replies  []fake.Reply
		opts     []Option
		wantCode string
	}{
		{"provider error", []fake.Reply{fake.Error(&provider.Error{Provider: "fake", Kind: provider.KindTransient, StatusCode: 503})}, nil, "provider_error"},
		{"empty reply", []fake.Reply{fake.Text("")}, nil, "empty_reply"},
		{"no JSON", []fake.Reply{fake.Text("a"), fake.Text("b")}, []Option{WithReport()}, "invalid_output"},
		{"provider panic", []fake.Reply{fake.Respond(func(context.Context, provider.Request) (provider.Response, error) { panic("bug") })}, nil, "panic"},
		{"panic", []fake.Reply{fake.Text("fine")}, []Option{WithRender(func(context.Context, Outcome) (string, error) { panic("bug") })}, "panic"},
		{"timeout", []fake.Reply{fake.Text("late").After(time.Hour)}, []Option{WithTimeout(time.Second)}, "timeout"},
		{"max steps", []fake.Reply{fake.Call("x", `{}`), fake.Call("x", `{}`)}, []Option{WithReactOptions(agent.WithMaxSteps(1))}, "max_steps"},
	}
	for _, f := range forms {
		for _, tt := range tests {
			if tt.name == "max steps" && f.name != "FromReact" {
				continue
			}
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var replies []fake.Reply
					for _, r := range tt.replies {
						replies = append(replies, r.For("child"))
					}
					sub := f.build(t, fake.NewProvider(replies...), nil, tt.opts...)
					var rec recorder
					_, err := callTool(rec.context(context.Background()), sub, "call_7", `{"task":"x"}`)
					if err == nil {
						t.Fatal("the call did not fail")
					}
					events := rec.subagentEvents()
					checkPairing(t, events)
					if len(events) != 2 || events[0].ParentToolCallID != "call_7" {
						t.Fatalf("events = %+v, want STARTED for call_7 and ERROR", events)
					}
					want := event.Event{Type: event.SubagentError, SubagentRunID: events[0].SubagentRunID, Message: err.Error(), Code: tt.wantCode}
					// What it spent before failing is there too
					// (TestNestedEvents checks the counts).
					if diff := cmp.Diff(want, events[1], cmpopts.IgnoreFields(event.Event{}, "Timestamp", "Usage", "Model")); diff != "" {
						t.Errorf("ERROR event (-want +got):\n%s", diff)
					}
				})
			})
		}
	}
}

// Busy and cancelled invocations close with their codes too.
func TestBusyAndCancelledEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p := fake.NewProvider(fake.Respond(func(ctx context.Context, _ provider.Request) (provider.Response, error) {
			select {
			case <-release:
				return reply("ok")
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		}).For("child")).Loop()
		child := newReact(t, p, agent.WithName("child"))
		sub := must(FromAgent("child", "x", child, WithRefuseWhenBusy()))(t)
		var rec recorder
		ctx, cancel := context.WithCancel(rec.context(context.Background()))
		done := make(chan error, 1)
		go func() {
			_, err := callTool(ctx, sub, "call_1", `{"task":"x"}`)
			done <- err
		}()
		synctest.Wait()
		if _, err := callTool(rec.context(context.Background()), sub, "call_2", `{"task":"x"}`); !errors.Is(err, ErrBusy) {
			t.Fatalf("error = %v, want ErrBusy", err)
		}
		cancel()
		<-done
		close(release)
		events := rec.subagentEvents()
		checkPairing(t, events)
		var codes []string
		for _, e := range events {
			if e.Type == event.SubagentError {
				codes = append(codes, e.Code)
			}
		}
		if diff := cmp.Diff([]string{"busy", "cancelled"}, codes); diff != "" {
			t.Errorf("error codes (-want +got):\n%s", diff)
		}
	})
}

// A sub-agent of a sub-agent names its parent invocation: a FromReact
// child at depth cap 2 whose child is another SubAgentTool. Each
// invocation's SUBAGENT_FINISHED carries what it spent per provider and
// model, its own sub-agents' included, and the model it ran on.
func TestNestedEvents(t *testing.T) {
	u := func(in, out int64) provider.Usage {
		return provider.Usage{Requests: 1, InputTokens: in, OutputTokens: out}
	}
	p := fake.NewProvider(
		fake.Call("planner", `{"system_prompt":"You plan.","task":"Plan the trip."}`).WithUsage(u(1000, 100)).For("lead"),
		fake.Text("Planned.").WithUsage(u(1000, 100)).For("lead"),
	).Named("acme", "big")
	pp := fake.NewProvider(
		fake.Call("helper", `{"task":"Find trains."}`).WithUsage(u(30, 3)).For("planner"),
		fake.Text("Plan: take the 9:00 train.").WithUsage(u(40, 4)).For("planner"),
	).Named("acme", "mid")
	hp := fake.NewProvider(fake.Text("The 9:00 train.").WithUsage(u(5, 1)).For("helper")).Named("other", "small")
	helper := must(FromFactory("helper", "Finds things.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(hp, agent.WithName("helper"))
	}, WithMaxDepth(2)))(t)
	var planned Outcome
	planner := must(FromReact("planner", "Plans.", pp, must(tool.NewRegistry(helper))(t), WithMaxDepth(2),
		WithOutcome(func(_ context.Context, o Outcome) { planned = o })))(t)
	lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(planner))

	var rec recorder
	out, err := lead.Run(rec.context(context.Background()), agent.Input{Text: "Plan my trip."})
	if err != nil {
		t.Fatal(err)
	}
	all := rec.all()
	started := checkPairing(t, all)
	if len(started) != 2 {
		t.Fatalf("%d invocations, want 2", len(started))
	}
	leadCall := out.Messages[1].ToolCalls[0].ID
	pl, he := started[0], started[1]
	// The planner's call as the stream names it: apart from the tree's
	// other calls, whose models may have chosen the same id.
	plannerCall := event.CallID(pl.SubagentRunID, pp.RequestsFor("planner")[1].Messages[1].ToolCalls[0].ID)
	want := []event.Event{
		{Type: event.SubagentStarted, SubagentRunID: pl.SubagentRunID, Name: "planner", Description: "Plans.", ParentToolCallID: leadCall},
		{Type: event.SubagentStarted, SubagentRunID: he.SubagentRunID, Name: "helper", Description: "Finds things.",
			ParentSubagentRunID: pl.SubagentRunID, ParentToolCallID: plannerCall},
		{Type: event.SubagentFinished, SubagentRunID: he.SubagentRunID, Result: event.JSONString("The 9:00 train."),
			Usage: json.RawMessage(`[{"provider":"other","model":"small","inputTokens":5,"outputTokens":1,"totalTokens":6}]`), Model: "small"},
		{Type: event.SubagentFinished, SubagentRunID: pl.SubagentRunID, Result: event.JSONString("Plan: take the 9:00 train."),
			Usage: json.RawMessage(`[{"provider":"acme","model":"mid","inputTokens":70,"outputTokens":7,"totalTokens":77},` +
				`{"provider":"other","model":"small","inputTokens":5,"outputTokens":1,"totalTokens":6}]`), Model: "mid"},
	}
	if diff := cmp.Diff(want, rec.subagentEvents(), cmpopts.IgnoreFields(event.Event{}, "Timestamp")); diff != "" {
		t.Errorf("SUBAGENT events (-want +got):\n%s", diff)
	}
	// The Go caller gets the same, and the call's arguments.
	wantModels := []provider.ModelUsage{
		{Provider: "acme", Model: "mid", Usage: provider.Usage{Requests: 2, InputTokens: 70, OutputTokens: 7}},
		{Provider: "other", Model: "small", Usage: u(5, 1)},
	}
	if diff := cmp.Diff(wantModels, planned.Models); diff != "" {
		t.Errorf("Outcome.Models (-want +got):\n%s", diff)
	}
	if got, want := string(planned.Arguments), `{"system_prompt":"You plan.","task":"Plan the trip."}`; got != want {
		t.Errorf("Outcome.Arguments = %s, want %s", got, want)
	}
	if planned.RunID != pl.SubagentRunID || planned.Usage != (provider.Usage{Requests: 3, InputTokens: 75, OutputTokens: 8}) {
		t.Errorf("Outcome = {RunID %s, Usage %v}, want {%s, 3 req, 75 in, 8 out}", planned.RunID, planned.Usage, pl.SubagentRunID)
	}
	// The planner's call of the helper is announced under the planner's
	// invocation.
	var announced bool
	for _, e := range all {
		if e.Type == event.ToolCallStart && e.ToolCallID == plannerCall {
			announced = e.SubagentRunID == pl.SubagentRunID
		}
	}
	if !announced {
		t.Error("the planner's TOOL_CALL_START is not attributed to the planner's invocation")
	}
}

// The events encode with AG-UI's camelCase field names.
func TestEventsEncodeAsAGUIJSON(t *testing.T) {
	ok := fake.NewProvider(fake.Text("fine").For("child"))
	bad := fake.NewProvider(fake.Text("").For("child"))
	var rec recorder
	ctx := rec.context(context.Background())
	if _, err := callTool(ctx, forms[1].build(t, ok, nil), "call_1", `{"task":"x"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := callTool(ctx, forms[1].build(t, bad, nil), "call_2", `{"task":"x"}`); err == nil {
		t.Fatal("the call did not fail")
	}
	var got [][]string
	for _, e := range rec.subagentEvents() {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		got = append(got, keys)
	}
	want := [][]string{
		{"description", "name", "parentToolCallId", "subagentRunId", "type"},
		{"metadata", "result", "subagentRunId", "type"},
		{"description", "name", "parentToolCallId", "subagentRunId", "type"},
		{"code", "message", "metadata", "subagentRunId", "type"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON keys (-want +got):\n%s", diff)
	}
	b, _ := json.Marshal(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_2", Name: "n", ParentSubagentRunID: "sub_1"})
	if string(b) != `{"type":"SUBAGENT_STARTED","subagentRunId":"sub_2","name":"n","parentSubagentRunId":"sub_1"}` {
		t.Errorf("parentSubagentRunId encodes as %s", b)
	}
}

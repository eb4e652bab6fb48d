package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// treeLead builds a lead that calls a planner and a flaky helper in one
// turn; the planner calls a finder. Each runs on a model of its own.
func treeLead(t *testing.T, flaky fake.Reply) *agent.React {
	t.Helper()
	u := func(in, out int64) provider.Usage {
		return provider.Usage{Requests: 1, InputTokens: in, OutputTokens: out}
	}
	lp := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{Name: "planner", Arguments: json.RawMessage(`{"task":"Plan the trip."}`)},
			provider.ToolCall{Name: "flaky", Arguments: json.RawMessage(`{"task":"Book a table."}`)},
		).WithUsage(u(1000, 100)).For("lead"),
		fake.Text("Done.").WithUsage(u(1000, 100)).For("lead"),
	).Named("acme", "big")
	pp := fake.NewProvider(
		fake.Call("finder", `{"task":"Find trains."}`).WithUsage(u(30, 3)).For("planner"),
		fake.Text("Take the 9:00 train.").WithUsage(u(40, 4)).For("planner"),
	).Named("acme", "mid")
	fp := fake.NewProvider(fake.Text("The 9:00 train.").WithUsage(u(5, 1)).For("finder")).Named("other", "small")
	xp := fake.NewProvider(flaky.For("flaky")).Named("other", "tiny")
	factory := func(p provider.Provider, name string) subagent.Factory {
		return func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName(name))
		}
	}
	finder, err := subagent.FromFactory("finder", "Finds things.", factory(fp, "finder"), subagent.WithMaxDepth(2))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(finder)
	if err != nil {
		t.Fatal(err)
	}
	planner, err := subagent.FromReact("planner", "Plans.", pp, reg, subagent.WithMaxDepth(2))
	if err != nil {
		t.Fatal(err)
	}
	flakyTool, err := subagent.FromFactory("flaky", "Fails.", factory(xp, "flaky"))
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(lp, agent.WithName("lead"), agent.WithTools(planner, flakyTool))
	if err != nil {
		t.Fatal(err)
	}
	return lead
}

// The tree holds every invocation under the one that started it, with its
// arguments, state, model, usage per model and times; the events go on to
// the sink it wraps.
func TestTree(t *testing.T) {
	lead := treeLead(t, fake.Error(&provider.Error{Provider: "other", Kind: provider.KindTransient, StatusCode: 503}))
	// Children run in parallel, so the wrapped sink is called concurrently.
	var passed atomic.Int64
	tree := subagent.NewTree(event.SinkFunc(func(event.Event) { passed.Add(1) }))
	start := time.Now()
	if _, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Plan my trip."}); err != nil {
		t.Fatal(err)
	}
	roots := tree.Roots()
	slices.SortFunc(roots, func(a, b *subagent.Node) int { return strings.Compare(a.Name, b.Name) })
	if len(roots) != 2 {
		t.Fatalf("%d roots, want the flaky helper and the planner", len(roots))
	}
	flaky, planner := roots[0], roots[1]
	if len(planner.Children) != 1 {
		t.Fatalf("the planner has %d children, want the finder", len(planner.Children))
	}
	finder := planner.Children[0]
	for _, n := range []*subagent.Node{flaky, planner, finder} {
		if n.RunID == "" || n.ToolCallID == "" || n.Started.Before(start.Truncate(time.Millisecond)) || n.Finished.Before(n.Started) || n.Wall() < 0 {
			t.Errorf("%s: run id %q, tool call %q, started %v, finished %v", n.Name, n.RunID, n.ToolCallID, n.Started, n.Finished)
		}
	}
	type view struct {
		Name, Args, Model, Result, Error, Code string
		State                                  subagent.State
		Usage                                  []provider.ModelUsage
		Children                               int
	}
	see := func(n *subagent.Node) view {
		return view{n.Name, string(n.Arguments), n.Model, string(n.Result), n.Error, n.Code, n.State, n.Usage, len(n.Children)}
	}
	got := []view{see(flaky), see(planner), see(finder)}
	want := []view{
		{Name: "flaky", Args: `{"task":"Book a table."}`, State: subagent.StateFailed, Code: "provider_error", Error: flaky.Error},
		{Name: "planner", Args: `{"task":"Plan the trip."}`, Model: "mid", Result: `"Take the 9:00 train."`, State: subagent.StateSucceeded,
			Usage: []provider.ModelUsage{
				{Provider: "acme", Model: "mid", Usage: provider.Usage{InputTokens: 70, OutputTokens: 7}},
				{Provider: "other", Model: "small", Usage: provider.Usage{InputTokens: 5, OutputTokens: 1}},
			}, Children: 1},
		{Name: "finder", Args: `{"task":"Find trains."}`, Model: "small", Result: `"The 9:00 train."`, State: subagent.StateSucceeded,
			Usage: []provider.ModelUsage{{Provider: "other", Model: "small", Usage: provider.Usage{InputTokens: 5, OutputTokens: 1}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
	if flaky.Error == "" {
		t.Error("the failed call has no error message")
	}
	if planner.TotalUsage() != (provider.Usage{InputTokens: 75, OutputTokens: 8}) {
		t.Errorf("planner's total usage %v", planner.TotalUsage())
	}
	// Priced per provider and model, its child's calls included; a model
	// the table lacks is named.
	prices, err := provider.NewPrices(map[string]provider.Price{"acme/mid": {Input: 1, Output: 10}, "small": {Input: 2, Output: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if dollars, unpriced := planner.Cost(prices); dollars != 70+70+10+20 || len(unpriced) != 0 {
		t.Errorf("the planner cost %v (unpriced %v), want 170", dollars, unpriced)
	}
	empty, err := provider.NewPrices(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, unpriced := finder.Cost(empty); len(unpriced) != 1 || unpriced[0] != "other/small" {
		t.Errorf("with an empty table, unpriced %v", unpriced)
	}
	if passed.Load() == 0 {
		t.Error("no event reached the wrapped sink")
	}
	// Roots is a copy: changing it changes nothing in the tree.
	planner.Children[0].Name = "changed"
	for _, n := range tree.Roots() {
		for _, c := range n.Children {
			if c.Name == "changed" {
				t.Error("Roots shares its nodes with the tree")
			}
		}
	}
}

// A call the caller cancels ends Cancelled; one still running reads as
// Running.
func TestTreeCancelledAndRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wait := fake.Respond(func(ctx context.Context, _ provider.Request) (provider.Response, error) {
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		})
		lead := treeLead(t, wait)
		tree := subagent.NewTree(nil)
		ctx, cancel := context.WithCancel(event.WithSink(context.Background(), tree))
		done := make(chan error, 1)
		go func() {
			_, err := lead.Run(ctx, agent.Input{Text: "Plan my trip."})
			done <- err
		}()
		synctest.Wait()
		states := map[string]subagent.State{}
		for _, n := range tree.Roots() {
			states[n.Name] = n.State
		}
		if states["flaky"] != subagent.StateRunning || states["planner"] != subagent.StateSucceeded {
			t.Errorf("while the flaky call waits: states %v, want flaky running and planner succeeded", states)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("run error %v, want context.Canceled", err)
		}
		for _, n := range tree.Roots() {
			if n.Name == "flaky" && (n.State != subagent.StateCancelled || n.Code != "cancelled") {
				t.Errorf("cancelled call: state %s, code %q", n.State, n.Code)
			}
		}
	})
}

// Fed a stream by hand: a suspended invocation, one whose start the tree
// never saw, and tool calls that never spawned anything.
func TestTreeFromEvents(t *testing.T) {
	tree := subagent.NewTree(nil)
	for _, e := range []event.Event{
		{Type: event.ToolCallStart, ToolCallID: "c1", ToolCallName: "approver"},
		{Type: event.ToolCallArgs, ToolCallID: "c1", Delta: `{"task":`},
		{Type: event.ToolCallArgs, ToolCallID: "c1", Delta: `"ship"}`},
		{Type: event.ToolCallEnd, ToolCallID: "c1"},
		{Type: event.ToolCallStart, ToolCallID: "c2", ToolCallName: "search"},
		{Type: event.ToolCallArgs, ToolCallID: "c2", Delta: `{}`},
		{Type: event.ToolCallEnd, ToolCallID: "c2"},
		{Type: event.ToolCallResult, ToolCallID: "c2", Content: "found"},
		{Type: event.SubagentStarted, SubagentRunID: "sub_1", Name: "approver", ParentToolCallID: "c1", Timestamp: 1000},
		{Type: event.SubagentFinished, SubagentRunID: "sub_1", Outcome: json.RawMessage(`{"type":"suspended","interruptIds":["i1"]}`), Timestamp: 3500},
		{Type: event.SubagentFinished, SubagentRunID: "sub_unseen", Result: event.JSONString("x")},
		{Type: event.SubagentStarted, SubagentRunID: "sub_2", Name: "late", ParentSubagentRunID: "sub_gone", ParentToolCallID: "c9", Timestamp: 2000},
	} {
		tree.Emit(e)
	}
	roots := tree.Roots()
	if len(roots) != 2 {
		t.Fatalf("%d roots, want 2", len(roots))
	}
	if n := roots[0]; n.State != subagent.StateSuspended || string(n.Arguments) != `{"task":"ship"}` || n.Wall() != 2500*time.Millisecond {
		t.Errorf("suspended node: state %s, arguments %s, wall %v", n.State, n.Arguments, n.Wall())
	}
	// A parent the tree never saw makes the node a root; its call streamed
	// no arguments here.
	if n := roots[1]; n.Name != "late" || n.State != subagent.StateRunning || n.Arguments != nil || !n.Finished.IsZero() {
		t.Errorf("orphan node %+v", n)
	}
}

// A resumed run of a turn announces again the invocations it goes on with,
// under the same run ids, and under new tool call ids when its model
// names its calls afresh: the Tree given both runs keeps one node per
// invocation, a child under its parent, with the state and usage the
// last run reported.
func TestTreeKeepsOneNodePerInvocationAcrossRuns(t *testing.T) {
	tree := subagent.NewTree(nil)
	usage := func(in int) json.RawMessage {
		return json.RawMessage(`[{"provider":"p","model":"m","inputTokens":` + strconv.Itoa(in) + `,"outputTokens":1}]`)
	}
	// The first run: the lead's call starts the planner, whose call starts
	// a researcher that asks a question.
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_p", Name: "planner", ParentToolCallID: "call_1"})
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_r", Name: "researcher", ParentToolCallID: "call_2", ParentSubagentRunID: "sub_p"})
	tree.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: "sub_r", Outcome: json.RawMessage(`{"type":"suspended"}`), Usage: usage(10)})
	tree.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: "sub_p", Outcome: json.RawMessage(`{"type":"suspended"}`), Usage: usage(20)})
	// The resumed run, its calls named afresh.
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_p", Name: "planner", ParentToolCallID: "call_7"})
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_r", Name: "researcher", ParentToolCallID: "call_8", ParentSubagentRunID: "sub_p"})
	tree.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: "sub_r", Result: json.RawMessage(`"found"`), Usage: usage(30)})
	tree.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: "sub_p", Result: json.RawMessage(`"planned"`), Usage: usage(50)})

	roots := tree.Roots()
	if len(roots) != 1 || len(roots[0].Children) != 1 {
		t.Fatalf("%d roots (the first with %d children), want one planner with one researcher", len(roots), len(roots[0].Children))
	}
	p, r := roots[0], roots[0].Children[0]
	if p.RunID != "sub_p" || p.State != subagent.StateSucceeded || p.ToolCallID != "call_7" || p.TotalUsage().InputTokens != 50 {
		t.Errorf("planner: %s %s call %s, %d input tokens; want sub_p succeeded, call_7, 50", p.RunID, p.State, p.ToolCallID, p.TotalUsage().InputTokens)
	}
	if r.RunID != "sub_r" || r.State != subagent.StateSucceeded || r.ToolCallID != "call_8" || r.TotalUsage().InputTokens != 30 || len(r.Children) != 0 {
		t.Errorf("researcher: %s %s call %s, %d input tokens, %d children; want sub_r succeeded, call_8, 30, none", r.RunID, r.State, r.ToolCallID, r.TotalUsage().InputTokens, len(r.Children))
	}
}

// Children are in the order their calls were made, whatever order they
// started in, and a call id that two runs both use (a model whose ids
// restart at call_0) keeps each call's arguments apart.
func TestTreeOrdersChildrenByTheirCallsAndKeepsRepeatedIDsApart(t *testing.T) {
	tree := subagent.NewTree(nil)
	announce := func(run, id, args string) {
		tree.Emit(event.Event{Type: event.ToolCallStart, SubagentRunID: run, ToolCallID: id, ToolCallName: "worker"})
		tree.Emit(event.Event{Type: event.ToolCallArgs, SubagentRunID: run, ToolCallID: id, Delta: args})
		tree.Emit(event.Event{Type: event.ToolCallEnd, SubagentRunID: run, ToolCallID: id})
	}
	start := func(parent, id, run string) {
		tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: run, Name: "worker", ParentSubagentRunID: parent, ParentToolCallID: id})
	}
	announce("", "call_0", `{"n":"a"}`)
	announce("", "call_1", `{"n":"b"}`)
	start("", "call_1", "sub_b") // the second call's child starts first
	start("", "call_0", "sub_a")
	announce("sub_a", "call_0", `{"n":"a0"}`)
	announce("sub_b", "call_0", `{"n":"b0"}`)
	start("sub_b", "call_0", "sub_b0")
	start("sub_a", "call_0", "sub_a0")
	var got []string
	for _, n := range tree.Roots() {
		got = append(got, n.RunID+string(n.Arguments))
		for _, c := range n.Children {
			got = append(got, c.RunID+string(c.Arguments))
		}
	}
	want := []string{`sub_a{"n":"a"}`, `sub_a0{"n":"a0"}`, `sub_b{"n":"b"}`, `sub_b0{"n":"b0"}`}
	if !slices.Equal(got, want) {
		t.Errorf("tree %v, want %v", got, want)
	}
}

// The validator's rejections reach the tree: a child whose first answer
// does not fit is asked again once (Retries 1), a child whose correction
// fits no better is rejected twice, and a child whose first answer fits
// has neither; each rejection is a ValidationEvent with its verdict.
func TestTreeCountsTheValidatorsRetries(t *testing.T) {
	lp := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{Name: "checker", Arguments: json.RawMessage(`{"task":"fits at once"}`)},
			provider.ToolCall{Name: "checker", Arguments: json.RawMessage(`{"task":"fits the second time"}`)},
			provider.ToolCall{Name: "checker", Arguments: json.RawMessage(`{"task":"never fits"}`)},
		).For("lead"),
		fake.Text("Done.").For("lead"),
	)
	report := `{"status":"success","summary":"fine","findings":null}`
	answers := map[string][]string{
		"fits at once":         {report},
		"fits the second time": {"It looks fine.", report},
		"never fits":           {"It looks fine.", "Still fine."},
	}
	checker, err := subagent.FromFactory("checker", "Checks.", func(_ context.Context, args json.RawMessage) (agent.Agent, error) {
		var a struct{ Task string }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		return agent.Func(func(_ context.Context, in agent.Input) (agent.Output, error) {
			tries := 0
			if strings.Contains(in.Text, "rejected") {
				tries = 1
			}
			return agent.Output{Answer: answers[a.Task][tries], Usage: provider.Usage{Requests: 1}}, nil
		}), nil
	}, subagent.WithReport())
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(lp, agent.WithName("lead"), agent.WithTools(checker))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // the children run in parallel
	var verdicts []string
	tree := subagent.NewTree(event.SinkFunc(func(e event.Event) {
		if e.Type == event.Custom && e.Name == subagent.ValidationEvent {
			mu.Lock()
			defer mu.Unlock()
			var v struct{ Verdict, Problem string }
			if err := json.Unmarshal(e.Value, &v); err != nil || v.Problem == "" || e.SubagentRunID == "" {
				t.Errorf("a validation event %s under %q: %v", e.Value, e.SubagentRunID, err)
			}
			verdicts = append(verdicts, v.Verdict)
		}
	}))
	if _, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Check."}); err != nil {
		t.Fatal(err)
	}
	type view struct {
		Task              string
		Retries, Rejected int
	}
	var got []view
	for _, n := range tree.Roots() {
		var a struct{ Task string }
		json.Unmarshal(n.Arguments, &a)
		got = append(got, view{a.Task, n.Retries, n.Rejected})
	}
	want := []view{{"fits at once", 0, 0}, {"fits the second time", 1, 1}, {"never fits", 1, 2}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("retries (-want +got):\n%s", diff)
	}
	slices.Sort(verdicts)
	if diff := cmp.Diff([]string{"fail", "retry", "retry"}, verdicts); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
}

// A background job's spawn returns its receipt at once, so the job's
// SUBAGENT_STARTED can reach the Tree after the spawn call's result: the
// node still gets the call's arguments and its place among its siblings.
func TestTreeKeepsAnAnsweredCallForAJobThatStartsLater(t *testing.T) {
	tree := subagent.NewTree(nil)
	announce := func(id, args string) {
		tree.Emit(event.Event{Type: event.ToolCallStart, ToolCallID: id, ToolCallName: "worker"})
		tree.Emit(event.Event{Type: event.ToolCallArgs, ToolCallID: id, Delta: args})
		tree.Emit(event.Event{Type: event.ToolCallEnd, ToolCallID: id})
	}
	announce("call_a", `{"task":"first"}`)
	announce("call_b", `{"task":"second"}`)
	tree.Emit(event.Event{Type: event.ToolCallResult, ToolCallID: "call_b", Content: `{"job":"job_2","state":"running"}`})
	tree.Emit(event.Event{Type: event.ToolCallResult, ToolCallID: "call_a", Content: `{"job":"job_1","state":"running"}`})
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_b", Name: "worker", ParentToolCallID: "call_b"})
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_a", Name: "worker", ParentToolCallID: "call_a"})
	var got []string
	for _, n := range tree.Roots() {
		got = append(got, n.RunID+string(n.Arguments))
	}
	if want := []string{`sub_a{"task":"first"}`, `sub_b{"task":"second"}`}; !slices.Equal(got, want) {
		t.Errorf("tree %v, want %v", got, want)
	}

	// A call id used again names a new call: a later call_a that streamed
	// no arguments does not take the first one's.
	tree.Emit(event.Event{Type: event.ToolCallResult, ToolCallID: "call_c"})
	announce("call_c", `{"task":"third"}`)
	tree.Emit(event.Event{Type: event.ToolCallResult, ToolCallID: "call_c"})
	tree.Emit(event.Event{Type: event.ToolCallStart, ToolCallID: "call_c", ToolCallName: "worker"})
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_c", Name: "worker", ParentToolCallID: "call_c"})
	if roots := tree.Roots(); len(roots) != 3 || roots[2].Arguments != nil {
		t.Errorf("a call named again took the earlier call's arguments: %+v", roots[len(roots)-1])
	}
}

// What the Tree keeps of answered calls is bounded: a sub-agent that
// starts after hundreds of later calls had their results has no
// arguments, and the Tree does not grow with every call of a long run.
func TestTreeForgetsAnsweredCallsPastItsBound(t *testing.T) {
	tree := subagent.NewTree(nil)
	for i := range 1000 {
		id := "call_" + strconv.Itoa(i)
		tree.Emit(event.Event{Type: event.ToolCallStart, ToolCallID: id, ToolCallName: "search"})
		tree.Emit(event.Event{Type: event.ToolCallArgs, ToolCallID: id, Delta: `{"q":` + strconv.Itoa(i) + `}`})
		tree.Emit(event.Event{Type: event.ToolCallEnd, ToolCallID: id})
		tree.Emit(event.Event{Type: event.ToolCallResult, ToolCallID: id, Content: "found"})
	}
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_old", Name: "w", ParentToolCallID: "call_0"})
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_new", Name: "w", ParentToolCallID: "call_999"})
	roots := tree.Roots()
	if len(roots) != 2 {
		t.Fatalf("%d roots, want 2", len(roots))
	}
	args := map[string]string{}
	for _, n := range roots {
		args[n.RunID] = string(n.Arguments)
	}
	if args["sub_old"] != "" || args["sub_new"] != `{"q":999}` {
		t.Errorf("arguments %v: want none for the call 999 calls ago, {\"q\":999} for the last", args)
	}
}

// A call id answered, claimed and answered again (a model whose ids
// restart at call_0 in every reply) keeps its latest arguments for as
// long as any other answered call: its first answer's place, pushed out,
// does not take the second with it.
func TestTreeKeepsACallAnsweredAgainForItsWholeBound(t *testing.T) {
	tree := subagent.NewTree(nil)
	answer := func(id, args string) {
		tree.Emit(event.Event{Type: event.ToolCallStart, ToolCallID: id, ToolCallName: "worker"})
		tree.Emit(event.Event{Type: event.ToolCallArgs, ToolCallID: id, Delta: args})
		tree.Emit(event.Event{Type: event.ToolCallEnd, ToolCallID: id})
		tree.Emit(event.Event{Type: event.ToolCallResult, ToolCallID: id, Content: "receipt"})
	}
	answer("call_0", `{"n":1}`)
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_1", Name: "worker", ParentToolCallID: "call_0"})
	answer("call_0", `{"n":2}`)
	for i := range 255 { // the second answer and these are the last 256 answered
		answer("other_"+strconv.Itoa(i), `{}`)
	}
	tree.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_2", Name: "worker", ParentToolCallID: "call_0"})
	args := map[string]string{}
	for _, n := range tree.Roots() {
		args[n.RunID] = string(n.Arguments)
	}
	if args["sub_1"] != `{"n":1}` || args["sub_2"] != `{"n":2}` {
		t.Errorf("arguments %v, want each start to claim its own call's", args)
	}
}

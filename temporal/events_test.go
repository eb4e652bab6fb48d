package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// recorder is a sink that keeps what it is sent.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) Emit(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// shape is what a person sees of a run's events, whatever ids it has:
// each event's type, whose it is (the lead, or a sub-agent by name) and
// what it says; sorted, since siblings run in any order.
func shape(events []event.Event) []string {
	names := map[string]string{"": "lead"}
	for _, e := range events {
		if e.Type == event.SubagentStarted {
			names[e.SubagentRunID] = e.Name
		}
	}
	var out []string
	for _, e := range events {
		who := names[e.SubagentRunID]
		switch e.Type {
		case event.TextMessageContent:
			out = append(out, fmt.Sprintf("text %s: %s", who, e.Delta))
		case event.ToolCallStart:
			out = append(out, fmt.Sprintf("call %s: %s", who, e.ToolCallName))
		case event.ToolCallArgs:
			out = append(out, fmt.Sprintf("args %s: %s", who, e.Delta))
		case event.ToolCallResult:
			out = append(out, fmt.Sprintf("result %s: %s", who, e.Content))
		case event.SubagentStarted:
			out = append(out, fmt.Sprintf("started %s under %s", e.Name, names[e.ParentSubagentRunID]))
		case event.SubagentFinished:
			var r string
			_ = json.Unmarshal(e.Result, &r)
			out = append(out, fmt.Sprintf("finished %s: %s", who, r))
		case event.SubagentError:
			out = append(out, fmt.Sprintf("failed %s", who))
		case event.Custom:
			if e.Name == agent.UsageEvent {
				// Input counts follow each runtime's own prompts: the
				// fields, and the reply's output, are what must agree.
				var v struct{ Usage []map[string]any }
				_ = json.Unmarshal(e.Value, &v)
				var keys []string
				if len(v.Usage) == 1 {
					for k := range v.Usage[0] {
						keys = append(keys, k)
					}
					slices.Sort(keys)
					keys = append(keys, fmt.Sprint("out=", v.Usage[0]["outputTokens"]))
				}
				out = append(out, fmt.Sprintf("usage %s: %d entries %v", who, len(v.Usage), keys))
			}
		}
	}
	slices.Sort(out)
	return out
}

// eventsScript is a lead that, in one step, adds and spawns two forks,
// each of which answers its part; then it sums up.
func eventsScript() *script {
	return &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		task := lastUser(req)
		switch {
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage("done: " + task), nil
		case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
			return provider.AssistantMessage("all done"), nil
		}
		return provider.AssistantMessage("splitting",
			provider.ToolCall{ID: "a", Name: "add", Arguments: json.RawMessage(`{"x":1,"y":2}`)},
			provider.ToolCall{ID: "s1", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1"}`)},
			provider.ToolCall{ID: "s2", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 2"}`)}), nil
	}}
}

func addTool(t *testing.T) *tool.Registry {
	t.Helper()
	add, err := tool.New("add", "Adds.", func(ctx context.Context, in struct {
		X int `json:"x"`
		Y int `json:"y"`
	}) (int, error) {
		return in.X + in.Y, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(add)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// A tree on Temporal reports the events the same tree reports in process:
// the lead's text and calls, each fork started under the lead and
// finished with its answer, each call's result — published by the
// activities the tree runs anyway.
func TestEventsAsInProcess(t *testing.T) {
	hub := NewHub()
	var activities int
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": eventsScript()}, Tools: addTool(t), Events: hub})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-1"})
	env.SetOnActivityStartedListener(func(*activity.Info, context.Context, converter.EncodedValues) { activities++ })
	var onTemporal recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &onTemporal), "tree-1")()
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"add"}, Spawn: true}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}

	// The same tree in process.
	p := eventsScript()
	reg := addTool(t)
	spawn, err := subagent.NewSpawner(p, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(spawn); err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(reg.Tools()...))
	if err != nil {
		t.Fatal(err)
	}
	var inProcess recorder
	if _, err := lead.Run(event.WithSink(context.Background(), &inProcess), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(shape(inProcess.events), shape(onTemporal.events)); d != "" {
		t.Errorf("the events on Temporal differ from the events in process (-in process +on Temporal):\n%s", d)
	}
	if activities != 5 {
		t.Errorf("%d activities for 2 lead steps, 2 forks and one tool call, want 5: events must cost none", activities)
	}
}

// Each model call of a tree on Temporal reports what it spent as it
// ends, as in process (agent.UsageEvent, priced at the workers' prices),
// attributed to the agent that made it; the events add up to what the
// run reports.
func TestUsageEventPerModelCallOnTemporal(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": {Input: 1e-3, Output: 2e-3}})
	if err != nil {
		t.Fatal(err)
	}
	hub := NewHub()
	p := modelNamed{eventsScript(), "m1"}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: addTool(t), Events: hub, Prices: prices})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-u"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-u")()
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"add"}, Spawn: true}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	var in, outTok int64
	var cost float64
	events, byChild := 0, map[string]int{}
	for _, e := range rec.events {
		if e.Type != event.Custom || e.Name != agent.UsageEvent {
			continue
		}
		var v struct {
			Usage []struct {
				Model        string  `json:"model"`
				InputTokens  int64   `json:"inputTokens"`
				OutputTokens int64   `json:"outputTokens"`
				TotalTokens  int64   `json:"totalTokens"`
				CostUSD      float64 `json:"costUsd"`
			}
		}
		if err := json.Unmarshal(e.Value, &v); err != nil || len(v.Usage) != 1 {
			t.Fatalf("%s value %s: want {\"usage\":[one entry]} (%v)", agent.UsageEvent, e.Value, err)
		}
		u := v.Usage[0]
		if u.Model != "m1" || u.TotalTokens != u.InputTokens+u.OutputTokens || math.Abs(u.CostUSD-(float64(u.InputTokens)*1e-3+float64(u.OutputTokens)*2e-3)) > 1e-9 {
			t.Errorf("usage %+v: want model m1, its total, and its cost at the workers' prices", u)
		}
		events++
		byChild[e.SubagentRunID]++
		in, outTok, cost = in+u.InputTokens, outTok+u.OutputTokens, cost+u.CostUSD
	}
	calls, billed := p.script.total()
	if events != calls || len(byChild) != 3 {
		t.Errorf("%d usage events from %d agents, for %d model calls by the lead and two forks", events, len(byChild), calls)
	}
	total := out.TotalUsage()
	if in != billed.InputTokens || outTok != billed.OutputTokens || in != total.InputTokens || outTok != total.OutputTokens {
		t.Errorf("the usage events add up to %d in, %d out; the model billed %+v and the run reports %+v", in, outTok, billed, total)
	}
	if cost == 0 || math.Abs(cost-out.Cost) > 1e-9 {
		t.Errorf("the usage events cost $%v, the run reports $%v", cost, out.Cost)
	}
}

// modelNamed is a script that says which model answered.
type modelNamed struct {
	script *script
	model  string
}

func (m modelNamed) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	resp, err := m.script.Complete(ctx, req)
	resp.Model = m.model
	return resp, err
}

// A fork whose last reply takes it past its cost limit (its model counted
// far more input than the estimate) ends with that reply's answer, as in
// process, and its events say so: SUBAGENT_FINISHED. A workflow started
// before answerPastLimitChange fails it, and its events say so: no
// SUBAGENT_FINISHED with an answer its parent never gets, a SUBAGENT_ERROR
// instead.
func TestChildPastItsCostLimitIsNotAnnouncedFinished(t *testing.T) {
	t.Run("now", func(t *testing.T) { childPastItsCostLimit(t, false) })
	t.Run("before "+answerPastLimitChange, func(t *testing.T) { childPastItsCostLimit(t, true) })
}

func childPastItsCostLimit(t *testing.T, old bool) {
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": {Input: 1e-5, Output: 3e-5}})
	if err != nil {
		t.Fatal(err)
	}
	hub := NewHub()
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		var msg provider.Message
		switch {
		case strings.HasPrefix(lastUser(req), "part"):
			msg = provider.AssistantMessage("part done")
		case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
			msg = provider.AssistantMessage("lead done")
		default:
			msg = spawnCalls(1)
		}
		u := fake.Usage(req, msg)
		if strings.HasPrefix(lastUser(req), "part") {
			u.InputTokens = 3000 // far past what was estimated: $0.03, past its share
		}
		return provider.Response{Message: msg, Usage: u, Model: "m1"}, nil
	})
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Prices: prices, Events: hub})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-c"})
	if old {
		env.OnGetVersion(answerPastLimitChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	}
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-c")()
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, CostLimit: 0.05}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	var finished, failed int
	for _, e := range rec.events {
		switch e.Type {
		case event.SubagentFinished:
			finished++
		case event.SubagentError:
			failed++
		}
	}
	switch {
	case old && (finished != 0 || failed != 1):
		t.Errorf("%d SUBAGENT_FINISHED and %d SUBAGENT_ERROR for a fork that failed at its cost limit, want 0 and 1", finished, failed)
	case !old && (finished != 1 || failed != 0 || !strings.Contains(out.Answer, "lead done")):
		t.Errorf("%d SUBAGENT_FINISHED and %d SUBAGENT_ERROR for a fork that answered past its cost limit, want 1 and 0; the lead answered %q", finished, failed, out.Answer)
	}
}

// Every decision of the workers' policy is an event of the tree, as in
// process (a CUSTOM policy.EventName event on the run's sink), attributed
// to the run that made the call: each model call, each tool call and its
// result, each hand-off and each child's answer.
func TestPolicyDecisionsAreEventsOnTemporal(t *testing.T) {
	w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}}
	pol, err := policy.New(w)
	if err != nil {
		t.Fatal(err)
	}
	hub := NewHub()
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": eventsScript()}, Tools: addTool(t), Events: hub, Policy: pol})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-p"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-p")()
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"add"}, Spawn: true}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{} // "point tool by" (by: lead or fork)
	for _, e := range rec.events {
		if e.Type != event.Custom || e.Name != policy.EventName {
			continue
		}
		var v struct {
			Point, Verdict, Tool string
		}
		if err := json.Unmarshal(e.Value, &v); err != nil || v.Verdict != "allow" {
			t.Fatalf("%s value %s: want a decision to allow (%v)", policy.EventName, e.Value, err)
		}
		by := "lead"
		if e.SubagentRunID != "" {
			by = "fork"
		}
		got[v.Point+" "+v.Tool+" "+by]++
	}
	want := map[string]int{
		"model  lead": 2, "model  fork": 2,
		"tool add lead": 1, "result add lead": 1,
		"tool spawn_subagent lead": 2, "delegation spawn_subagent lead": 2, "result spawn_subagent lead": 2,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("policy events by point, tool and run (-want +got):\n%s", diff)
	}
	decided, events := 0, 0
	for _, c := range w.points {
		decided += c
	}
	for _, c := range got {
		events += c
	}
	if decided != events {
		t.Errorf("the policy made %d decisions and %d events tell of them, want one each", decided, events)
	}
}

// A run that fails after the reply of its last step ends that step once:
// a wrap-up call under a token limit answered with no text (nothing, or
// tool calls only, which a wrap-up drops) fails the run, there being no
// answer to give, and the step it was, published as started by its model
// call, is published as finished once, by the workflow; the calls the
// wrap-up dropped are not published as made.
func TestFailedWrapUpEndsItsStepOnce(t *testing.T) {
	add := provider.ToolCall{ID: "a", Name: "add", Arguments: json.RawMessage(`{"x":1,"y":2}`)}
	for name, wrapUp := range map[string]provider.Message{
		"no text":         provider.AssistantMessage(""),
		"tool calls only": provider.AssistantMessage("", provider.ToolCall{ID: "b", Name: "add", Arguments: json.RawMessage(`{"x":3,"y":4}`)}),
	} {
		t.Run(name, func(t *testing.T) {
			hub := NewHub()
			p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				if len(req.Tools) == 0 {
					return provider.Response{Message: wrapUp, Usage: provider.Usage{InputTokens: 100, OutputTokens: 1}, StopReason: provider.StopEndTurn}, nil
				}
				return provider.Response{Message: provider.AssistantMessage("", add), Usage: provider.Usage{InputTokens: 1000, OutputTokens: 400}, StopReason: provider.StopToolUse}, nil
			})
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: addTool(t), Events: hub})
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-w"})
			var rec recorder
			defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-w")()
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"add"}, TokenLimit: 3000}, Text: "go"})
			err := env.GetWorkflowError()
			if err == nil || !strings.Contains(err.Error(), "asked to wrap up, had no answer") {
				t.Fatalf("error %v, want the wrap-up's missing answer", err)
			}
			started, finished := map[string]int{}, map[string]int{}
			calls := 0
			for _, e := range rec.events {
				switch e.Type {
				case event.StepStarted:
					started[e.StepName]++
				case event.StepFinished:
					finished[e.StepName]++
				case event.ToolCallStart:
					calls++
				}
			}
			if len(started) != 2 {
				t.Fatalf("steps started %v, want two: the call of add and the wrap-up", started)
			}
			if d := cmp.Diff(started, finished); d != "" {
				t.Errorf("each step started must finish once (-started +finished):\n%s", d)
			}
			if calls != 1 {
				t.Errorf("%d tool calls published, want the first step's one: a wrap-up's calls are not made", calls)
			}
		})
	}
}

// A run whose model call is refused by the worker before it is made (the
// workers' policy denies it, or its reservation finds no room under the
// run's cost limit) ends the step before it, and the step the call was to
// make starts and ends, failed: each step published as started is
// published as finished once, and none is finished that did not start
// (the step before was left open, and the refused one finished without a
// start).
func TestRefusedModelCallEndsTheStepBeforeIt(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": {Input: 1e-3, Output: 1e-3}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		spec  Spec
		deny  bool
		steps map[string]int
		err   string
	}{
		{"denied", Spec{Name: "lead", Provider: "m", Tools: []string{"add"}}, true, map[string]int{"tree-d/step-1": 1, "tree-d/step-2": 1}, "one model call is enough"},
		{"no room", Spec{Name: "lead", Provider: "m", Model: "m1", Tools: []string{"add"}, CostLimit: 0.01}, false, map[string]int{"tree-d/step-1": 1}, "would leave no room for a reply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var models atomic.Int64
			pol, err := policy.New(policy.Func("second-model-call", func(ctx context.Context, ch *policy.Check) policy.Decision {
				if c.deny && ch.Point == policy.BeforeModel && models.Add(1) == 2 {
					return policy.Denied("one model call is enough")
				}
				return policy.Decision{}
			}))
			if err != nil {
				t.Fatal(err)
			}
			hub := NewHub()
			p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				msg := provider.AssistantMessage("", provider.ToolCall{ID: "a", Name: "add", Arguments: json.RawMessage(`{"x":1,"y":2}`)})
				return provider.Response{Message: msg, Usage: provider.Usage{InputTokens: 10, OutputTokens: 2}, StopReason: provider.StopToolUse, Model: "m1"}, nil
			})
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: addTool(t), Events: hub, Policy: pol, Prices: prices})
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-d"})
			var rec recorder
			defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-d")()
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: c.spec, Text: "go"})
			if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			started, finished := map[string]int{}, map[string]int{}
			for _, e := range rec.events {
				switch e.Type {
				case event.StepStarted:
					started[e.StepName]++
				case event.StepFinished:
					finished[e.StepName]++
				}
			}
			if d := cmp.Diff(c.steps, started); d != "" {
				t.Errorf("steps started (-want +got):\n%s", d)
			}
			if d := cmp.Diff(started, finished); d != "" {
				t.Errorf("each step started must finish once, and no other (-started +finished):\n%s", d)
			}
		})
	}
}

// A run under a cost limit alone whose wrap-up reply has no answer fails
// saying what it cost and which limit to raise, not a token limit of 0.
func TestFailedWrapUpUnderACostLimitNamesIt(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": {Input: 1e-6, Output: 1e-6}})
	if err != nil {
		t.Fatal(err)
	}
	add := provider.ToolCall{ID: "a", Name: "add", Arguments: json.RawMessage(`{"x":1,"y":2}`)}
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if len(req.Tools) == 0 {
			return provider.Response{Message: provider.AssistantMessage(""), Usage: provider.Usage{InputTokens: 100, OutputTokens: 1}, StopReason: provider.StopEndTurn, Model: "m1"}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("", add), Usage: provider.Usage{InputTokens: 1000, OutputTokens: 400}, StopReason: provider.StopToolUse, Model: "m1"}, nil
	})
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: addTool(t), Prices: prices})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"add"}, CostLimit: 0.003}, Text: "go"})
	err = env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "had no answer: raise Spec.CostLimit") || strings.Contains(err.Error(), "limit is 0") {
		t.Fatalf("error %v, want the wrap-up's missing answer under the cost limit", err)
	}
}

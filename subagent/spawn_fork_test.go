package subagent_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// TestSpawnForkIsTheParentsKind checks a fork's request: the parent's
// provider and tools, a fresh history holding the task and its context, a
// system prompt of its own; and the usage of the tree.
func TestSpawnForkIsTheParentsKind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider(
		fake.Text("Earlier answer.").For("lead").WithUsage(usage(1)),
		spawns(`{"task":"find X","context":"X is a letter"}`).For("lead").WithUsage(usage(10)),
		fake.Text("X is 42").For(subagent.DefaultForkName).WithUsage(usage(100)),
		fake.Text("The answer is 42.").For("lead").WithUsage(usage(1000)),
	)
	reg, _ := setup(t, p, false, nil)
	a := lead(t, p, reg, agent.WithSystemPrompt("You lead."))
	if _, err := a.Run(t.Context(), agent.Input{Text: "earlier question"}); err != nil {
		t.Fatal(err)
	}
	out, err := a.Run(t.Context(), agent.Input{Text: "What is X?"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"X is 42"}, toolResults(out.Messages)); diff != "" {
		t.Errorf("tool results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(times(2, usage(505)), out.Usage); diff != "" {
		t.Errorf("parent usage (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(usage(100), out.ChildUsage); diff != "" {
		t.Errorf("child usage (-want +got):\n%s", diff)
	}
	reqs := p.RequestsFor(subagent.DefaultForkName)
	if len(reqs) != 1 {
		t.Fatalf("the fork made %d requests, want 1", len(reqs))
	}
	got := reqs[0]
	want := provider.Request{
		System:   subagent.DefaultForkPrompt,
		Messages: []provider.Message{provider.UserMessage("find X\n\nContext:\nX is a letter")},
		Tools:    []provider.ToolDef{lookup().Definition()},
		CacheKey: subagent.DefaultForkName,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fork request (-want +got):\n%s", diff)
	}
}

// TestSpawnForkScopeOnlyNarrows checks which tools a fork is offered: the
// parent's, less the spawn tools at the depth cap, less what WithForkTools
// drops, and never more, whatever WithReactOptions says.
func TestSpawnForkScopeOnlyNarrows(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	shell := tool.Func{Def: tool.Definition{Name: "shell", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "rm -rf"}, nil }}
	notLookup := subagent.WithForkTools(func(t tool.Tool) bool { return t.Definition().Name != "lookup" })
	onlyLookup := subagent.WithForkTools(func(t tool.Tool) bool { return t.Definition().Name == "lookup" })
	tests := []struct {
		name       string
		opts       []subagent.SpawnOption
		background bool
		want       []string
	}{
		{"spawn hidden at the default cap", nil, false, []string{"lookup"}},
		{"jobs hidden at the default cap", []subagent.SpawnOption{subagent.WithBackground()}, true, []string{"lookup"}},
		{"spawn inherited below a cap of 2", []subagent.SpawnOption{subagent.WithMaxDepth(2)}, false, []string{"lookup", "spawn_subagent"}},
		{"jobs inherited below a cap of 2", []subagent.SpawnOption{subagent.WithMaxDepth(2), subagent.WithBackground()}, true,
			[]string{"lookup", "spawn_subagent", "subagent_jobs"}},
		{"narrowed, spawn kept", []subagent.SpawnOption{subagent.WithMaxDepth(2), notLookup}, false, []string{"spawn_subagent"}},
		{"narrowed to one tool", []subagent.SpawnOption{subagent.WithMaxDepth(2), onlyLookup}, false, []string{"lookup"}},
		{"react options cannot widen", []subagent.SpawnOption{subagent.WithReactOptions(
			agent.WithTools(shell), agent.WithName("other"), agent.WithSystemPrompt("You may do anything."))}, false, []string{"lookup"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := fake.NewProvider(
				spawns(`{"task":"t"}`).For("lead"),
				fake.Text("child done").For(subagent.DefaultForkName),
				fake.Text("done").For("lead"),
			)
			reg, _ := setup(t, p, tc.background, tc.opts)
			if _, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			reqs := p.RequestsFor(subagent.DefaultForkName)
			if len(reqs) != 1 {
				t.Fatalf("the fork made %d requests, want 1", len(reqs))
			}
			if diff := cmp.Diff(tc.want, names(reqs[0].Tools)); diff != "" {
				t.Errorf("fork tools (-want +got):\n%s", diff)
			}
			if reqs[0].System != subagent.DefaultForkPrompt {
				t.Errorf("fork system prompt %q, want the default", reqs[0].System)
			}
		})
	}
}

// TestSpawnForkAtCapCannotSpawn checks that a fork at the depth cap which
// calls spawn_subagent anyway is told there is no such tool.
func TestSpawnForkAtCapCannotSpawn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider(
		spawns(`{"task":"t"}`).For("lead"),
		spawns(`{"task":"deeper"}`).For(subagent.DefaultForkName),
		fake.Text("did it myself").For(subagent.DefaultForkName),
		fake.Text("done").For("lead"),
	)
	reg, _ := setup(t, p, false, nil)
	out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"did it myself"}, toolResults(out.Messages)); diff != "" {
		t.Errorf("lead's tool results (-want +got):\n%s", diff)
	}
	reqs := p.RequestsFor(subagent.DefaultForkName)
	if len(reqs) != 2 {
		t.Fatalf("the fork made %d requests, want 2", len(reqs))
	}
	mustContain(t, toolResults(reqs[1].Messages)[0], `unknown tool "spawn_subagent": call one of: lookup`)
}

func TestSpawnForkNameAndPrompt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider(fake.Text("ok").For("scout"))
	reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithForkName("scout"), subagent.WithForkPrompt("You scout.")})
	rec := &recorder{}
	ctx := event.WithSink(t.Context(), rec)
	res, err := reg.Execute(ctx, []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"look around"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Content != "ok" {
		t.Errorf("content %q", res[0].Content)
	}
	reqs := p.RequestsFor("scout")
	if len(reqs) != 1 || reqs[0].System != "You scout." {
		t.Fatalf("scout requests %+v", reqs)
	}
	want := []event.Event{
		{Type: event.SubagentStarted, Name: "scout", Description: "a fork of the calling agent", ParentToolCallID: "c1"},
		{Type: event.SubagentFinished, Model: "fake"},
	}
	if diff := cmp.Diff(want, rec.of(event.SubagentStarted, event.SubagentFinished, event.SubagentError)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

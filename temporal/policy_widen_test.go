package temporal

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A factory's agent given a policy of its own that would allow what the
// workers' policy forbids (an allow list naming rm, which the workers'
// leaves out) is refused before its first model call, as in process: a
// factory sub-agent and a factory member of the roster alike, its rm
// never runs, its model is never asked, and the lead's model reads why,
// its SUBAGENT_ERROR coded policy_widens. A policy that only narrows the
// workers' runs. Whatever ids the models give their calls.
func TestPolicyWideningRefusedOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		for _, wider := range []bool{true, false} {
			name := mode.name + "/narrower"
			if wider {
				name = mode.name + "/wider"
			}
			t.Run(name, func(t *testing.T) {
				policyWideningOnTemporal(t, mode.id, wider)
			})
		}
	}
}

func policyWideningOnTemporal(t *testing.T, id func(int64, int) string, wider bool) {
	w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}}
	pol, err := policy.New(w, policy.AllowTools("tools", policy.AnyDepth, "search", "worker", SpawnToolName))
	if err != nil {
		t.Fatal(err)
	}
	own, err := policy.New(policy.AllowTools("fewer", policy.AnyDepth, "search"))
	if wider {
		own, err = policy.New(policy.AllowTools("wide", policy.AnyDepth, "search", "rm"))
	}
	if err != nil {
		t.Fatal(err)
	}
	n := new(atomic.Int64)
	// Each child searches and removes; under a policy that narrows, its
	// rm is denied and its search runs.
	child := &steps{name: "child", id: id, n: n, steps: [][][2]string{{{"search", `{"q":"{task}"}`}, {"rm", `{}`}}}}
	lead := &steps{name: "lead", id: id, n: n, steps: [][][2]string{{
		{"worker", `{"task":"clean up"}`}, {SpawnToolName, `{"task":"clean up too","agent":"cleaner"}`}}}}
	tools := &countedTools{args: map[string][]string{}}
	childTools := []tool.Tool{tools.tool(t, "search"), tools.tool(t, "rm")}
	var builds atomic.Int64
	factory := func(name string) subagent.Factory {
		return func(context.Context, json.RawMessage) (agent.Agent, error) {
			builds.Add(1)
			return agent.NewReact(child, agent.WithName(name), agent.WithTools(childTools...), agent.WithPolicy(own))
		}
	}
	hub := NewHub()
	rt := &Runtime{
		Providers: map[string]provider.Provider{"m": lead},
		Factories: map[string]subagent.Factory{"worker": factory("worker"), "cleaner": factory("cleaner")},
		Policy:    pol,
		Events:    hub,
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true,
		SubAgents: []SubAgent{{Name: "worker", Description: "Works.", Factory: "worker"}},
		Roster:    []SubAgent{{Name: "cleaner", Description: "Cleans.", Factory: "cleaner"}}}
	env := newEnv(t, rt)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-widen"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-widen")()
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "tidy the disk"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if builds.Load() != 2 {
		t.Fatalf("the factories built %d agents, want the worker and the cleaner: the tree did not run as built", builds.Load())
	}
	// What the lead's model read of its two calls.
	var read []string
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool {
			read = append(read, m.Content)
		}
	}
	if len(read) != 2 {
		t.Fatalf("the lead read %q, want the results of its two calls", read)
	}
	// Each child's SUBAGENT_ERROR code, by the name its SUBAGENT_STARTED
	// gave its run.
	names := map[string]string{}
	var codes []string
	for _, e := range rec.events {
		switch e.Type {
		case event.SubagentStarted:
			names[e.SubagentRunID] = e.Name
		case event.SubagentError:
			codes = append(codes, names[e.SubagentRunID]+" "+e.Code)
		}
	}
	slices.Sort(codes)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !wider {
		if starts := child.starts(); starts != 2 || tools.runs("search") != 2 || tools.runs("rm") != 0 || len(codes) != 0 {
			t.Errorf("under a policy that narrows the workers', the children started %d times, ran search %d times and rm %d times, and failed %v; want each started, its search run, its rm denied",
				starts, tools.runs("search"), tools.runs("rm"), codes)
		}
		return
	}
	if tools.runs("rm") != 0 || tools.runs("search") != 0 || w.tools["rm"] != 0 {
		t.Errorf("rm ran %d times and search %d times (the policy saw %d calls of rm) under a child's policy that widens the workers'; want neither run",
			tools.runs("rm"), tools.runs("search"), w.tools["rm"])
	}
	if n, _ := child.sent(""); n != 0 {
		t.Errorf("the children's model was asked %d times, want never: their runs are refused before any model call", n)
	}
	for i, got := range read {
		for _, want := range []string{`rule "wide"`, `rule "tools"`, "Narrow"} {
			if !strings.Contains(got, want) {
				t.Errorf("the lead read %q of its call %d, want it to say %q", got, i, want)
			}
		}
	}
	if want := []string{"cleaner policy_widens", "worker policy_widens"}; !slices.Equal(codes, want) {
		t.Errorf("SUBAGENT_ERROR events %v, want %v", codes, want)
	}
	// The workers' policy saw the calls and their hand-offs (the member's
	// under its name), and no model call of the refused children.
	for _, want := range []string{"tool worker@lead", "delegation worker@lead", "tool " + SpawnToolName + "@lead", "delegation cleaner@lead"} {
		if !w.paths[want] {
			t.Errorf("no check %q; the checks were %v", want, w.paths)
		}
	}
	for _, refused := range []string{"model @lead/worker", "model @lead/cleaner"} {
		if w.paths[refused] {
			t.Errorf("the check %q was made, of a child whose run is refused", refused)
		}
	}
}

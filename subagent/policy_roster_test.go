package subagent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/subagent"
)

// A deny list naming a roster member stops its spawn, which is a call of
// spawn_subagent that names the member in its arguments, not a call of
// its name: the member's model is never called, the lead's model reads
// the denial, and the run's Denials name the rule — while another member
// of the same roster is spawned as usual.
func TestDenyListStopsASpawnedRosterMember(t *testing.T) {
	model := fake.NewProvider(
		fake.Call(subagent.SpawnToolName, `{"task":"dig","agent":"researcher"}`).For("lead"),
		fake.Call(subagent.SpawnToolName, `{"task":"write","agent":"writer"}`).For("lead"),
		fake.Text("done").For("lead"),
		fake.Text("dug").For("researcher"),
		fake.Text("written").For("writer"),
	)
	member := func(name string) *subagent.SubAgentTool {
		m, err := subagent.FromFactory(name, "A member.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName(name))
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	spawn, err := subagent.NewSpawner(model, nil, subagent.WithRoster(member("researcher"), member("writer")))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(policy.DenyTools("no-research", policy.AnyDepth, "researcher"))
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(spawn), agent.WithPolicy(pol))
	if err != nil {
		t.Fatal(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(model.RequestsFor("researcher")); n != 0 {
		t.Errorf("the denied member's model was called %d times", n)
	}
	if n := len(model.RequestsFor("writer")); n != 1 {
		t.Errorf("the other member's model was called %d times, want 1", n)
	}
	rs := toolResults(out.Messages)
	if len(rs) != 2 || !strings.Contains(rs[0], "researcher is not allowed here") || !strings.Contains(rs[1], "written") {
		t.Errorf("the lead read %q: want the researcher's spawn denied and the writer's answer", rs)
	}
	if len(out.Denials) != 1 || out.Denials[0].Rule != "no-research" {
		t.Errorf("Denials %+v, want one by no-research", out.Denials)
	}
}

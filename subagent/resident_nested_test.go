package subagent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
)

// A resident expert whose own tools run another agent: the inner agent's
// run is its own, not a run in the resident's held turn.
func TestResidentRunsAgentsOfItsOwn(t *testing.T) {
	inner := fake.NewProvider(fake.Text("inner answer"))
	deep, err := subagent.FromFactory("deep", "Goes deeper.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(inner, agent.WithName("inner"))
	}, subagent.WithMaxDepth(2))
	if err != nil {
		t.Fatal(err)
	}
	expertModel := fake.NewProvider(fake.Call("deep", `{"task":"look"}`), fake.Text("expert answer"))
	expert, err := agent.NewReact(expertModel, agent.WithName("expert"), agent.WithTools(deep))
	if err != nil {
		t.Fatal(err)
	}
	resident, err := subagent.FromAgent("expert", "A resident.", expert)
	if err != nil {
		t.Fatal(err)
	}
	leadModel := fake.NewProvider(fake.Call("expert", `{"task":"ask"}`), fake.Text("done"))
	lead, err := agent.NewReact(leadModel, agent.WithTools(resident))
	if err != nil {
		t.Fatal(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := expertModel.Requests()
	last := msgs[len(msgs)-1].Request.Messages
	if got := last[len(last)-1].Content; !strings.Contains(got, "inner answer") || out.Answer != "done" {
		t.Fatalf("the expert read %q from its sub-agent (answer %q)", got, out.Answer)
	}
}

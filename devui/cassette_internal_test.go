package devui

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// recordReview records a run of a lead that asks a researcher, who fans
// out to two analysts at once, and an editor; it returns the cassette and
// the run's tree.
func recordReview(t *testing.T) (*cassette.Cassette, []*subagent.Node) {
	t.Helper()
	rec := cassette.Record(fake.NewProvider(
		fake.Call("research", `{"task":"the numbers"}`).For("lead"),
		fake.Calls(provider.ToolCall{Name: "analyst", Arguments: []byte(`{"task":"part 1"}`)},
			provider.ToolCall{Name: "analyst", Arguments: []byte(`{"task":"part 2"}`)}).For("research"),
		fake.Text("Part checked.").For("analyst"),
		fake.Text("Part checked.").For("analyst"),
		fake.Text("The numbers hold.").For("research"),
		fake.Call("editor", `{"task":"the prose"}`).For("lead"),
		fake.Text("The prose is clear.").For("editor"),
		fake.Text("The draft is ready.").For("lead"),
	).Named("fake", "small-model"))
	analyst, err := subagent.FromReact("analyst", "Checks a part.", rec, nil, subagent.WithMaxDepth(2))
	if err != nil {
		t.Fatal(err)
	}
	research, err := subagent.FromFactory("research", "Researches.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(rec, agent.WithName("research"), agent.WithTools(analyst))
	}, subagent.WithMaxDepth(2))
	if err != nil {
		t.Fatal(err)
	}
	editor, err := subagent.FromReact("editor", "Edits.", rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(rec, agent.WithName("lead"), agent.WithTools(research, editor))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	if _, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review the draft."}); err != nil {
		t.Fatal(err)
	}
	c, err := rec.Cassette()
	if err != nil {
		t.Fatal(err)
	}
	return c, tree.Roots()
}

// The events the viewer draws a cassette from build the tree the recorded
// run built: who called whom, with what, what each answered and spent.
func TestACassetteDrawsTheTreeOfItsRun(t *testing.T) {
	c, roots := recordReview(t)
	tree := subagent.NewTree(nil)
	for _, e := range cassetteRun(c) {
		tree.Emit(e)
	}
	if d := cmp.Diff(treetest.Dump(roots), treetest.Dump(tree.Roots())); d != "" {
		t.Errorf("the cassette's tree (-recorded +drawn):\n%s", d)
	}
	drawn := tree.Roots()
	for i, n := range roots {
		if d := cmp.Diff(n.Usage, drawn[i].Usage); d != "" || drawn[i].Model != n.Model {
			t.Errorf("%s: model %q, recorded %q; usage (-recorded +drawn):\n%s", n.Name, drawn[i].Model, n.Model, d)
		}
	}
}

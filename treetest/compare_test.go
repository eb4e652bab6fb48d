package treetest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
)

// review runs a lead that asks a checker and an editor, on p, priced.
func review(t *testing.T, p provider.Provider) treetest.Run {
	t.Helper()
	prices, err := provider.NewPrices(map[string]provider.Price{
		"fake":  {Input: 1e-6, Output: 4e-6},
		"cheap": {Input: 1e-7, Output: 4e-7},
	})
	if err != nil {
		t.Fatal(err)
	}
	checker, err := subagent.FromReact("checker", "Checks the facts.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	editor, err := subagent.FromReact("editor", "Edits the prose.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(checker, editor), agent.WithPrices(prices))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	out, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review the draft."})
	if err != nil {
		t.Fatal(err)
	}
	return treetest.Run{Output: out, Tree: tree.Roots()}
}

func TestCompareRunsSetsARecordedRunBesideItsFork(t *testing.T) {
	rec := cassette.Record(fake.NewProvider(
		fake.Calls(provider.ToolCall{Name: "checker", Arguments: []byte(`{"task":"the numbers"}`)},
			provider.ToolCall{Name: "editor", Arguments: []byte(`{"task":"the prose"}`)}).For("lead"),
		fake.Text("The numbers hold.").For("checker"),
		fake.Text("The prose is clear.").For("editor"),
		fake.Text("The draft is ready.").For("lead"),
	))
	review(t, rec)
	c, err := rec.Cassette()
	if err != nil {
		t.Fatal(err)
	}
	before := review(t, cassette.Replay(c))

	cheap := fake.NewProvider(
		fake.Text("Two numbers are wrong.").For("checker"),
		fake.Text("The draft needs two fixes.").For("lead"),
	).Named("cheap", "cheap")
	fork, err := cassette.Fork(c, cheap, "lead/checker@*")
	if err != nil {
		t.Fatal(err)
	}
	after := review(t, fork)
	if cheap.Calls() != 2 {
		t.Fatalf("the cheap model answered %d calls, want 2 (the checker, then the lead)", cheap.Calls())
	}

	cmp := treetest.CompareRuns(before, after)
	if len(cmp.Rows) != 3 {
		t.Fatalf("%d rows, want 3 (the run, checker, editor):\n%s", len(cmp.Rows), cmp)
	}
	run, checker, editor := cmp.Rows[0], cmp.Rows[1], cmp.Rows[2]
	if run.Path != "" || !run.Changed() || run.After.Answer != "The draft needs two fixes." || run.Before.Answer != "The draft is ready." {
		t.Errorf("the run's row: %+v %+v %+v", run, run.Before, run.After)
	}
	if checker.Path != "checker" || !checker.Changed() || checker.Before.Model != "fake" || checker.After.Model != "cheap" ||
		checker.After.Answer != "Two numbers are wrong." || checker.After.Cost >= checker.Before.Cost || checker.After.Cost == 0 {
		t.Errorf("the checker's row: %+v %+v", checker.Before, checker.After)
	}
	if editor.Path != "editor" || editor.Changed() {
		t.Errorf("the editor, replayed in both, changed: %+v %+v", editor.Before, editor.After)
	}
	s := cmp.String()
	for _, want := range []string{"node", "(run)", "checker", "succeeded", "cheap", "$0.000"} {
		if !strings.Contains(s, want) {
			t.Errorf("the table does not say %q:\n%s", want, s)
		}
	}
	if lines := strings.Split(strings.TrimSpace(s), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[2], "*") || strings.HasPrefix(lines[3], "*") {
		t.Errorf("the table marks the wrong rows:\n%s", s)
	}
	t.Logf("\n%s", s)
}

func TestCompareRunsListsNodesOnlyOneRunHas(t *testing.T) {
	node := func(name, args string, kids ...*subagent.Node) *subagent.Node {
		return &subagent.Node{RunID: name + args, Name: name, Arguments: []byte(args), State: subagent.StateSucceeded, Result: []byte(`"ok"`), Children: kids}
	}
	before := treetest.Run{Tree: []*subagent.Node{node("a", `1`, node("x", `1`)), node("b", `1`)}}
	after := treetest.Run{Tree: []*subagent.Node{node("a", `1`, node("y", `1`)), node("c", `1`)}}
	var paths []string
	for _, r := range treetest.CompareRuns(before, after).Rows {
		side := "both"
		switch {
		case r.Before == nil:
			side = "after"
		case r.After == nil:
			side = "before"
		}
		paths = append(paths, r.Path+":"+side)
	}
	want := ":both a:both a/x:before a/y:after b:before c:after"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
}

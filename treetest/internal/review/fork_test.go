package review_test

import (
	"context"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
)

// snippet of docs/testing.md
func TestReviewWithACheaperChecker(t *testing.T) {
	c, err := cassette.Load("testdata/review.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// The recorded run, replayed: no model is called.
	before := runReview(t, cassette.Replay(c))

	// The same run with the checker on another model: openai.New(...) in
	// your tests, a scripted one here. The lead's first call is replayed;
	// the checker and what reads its answer run on the other model.
	cheap := fake.NewProvider(
		fake.Text("Two numbers are wrong.").For("checker"),
		fake.Call("editor", `{"task":"the prose"}`).For("lead"),
		fake.Text("The prose is clear.").For("editor"),
		fake.Text("The draft needs two fixes.").For("lead"),
	).Named("cheap", "cheap-model")
	fork, err := cassette.Fork(c, cheap, "lead/checker@*")
	if err != nil {
		t.Fatal(err)
	}
	after := runReview(t, fork)

	cmp := treetest.CompareRuns(before, after)
	t.Logf("\n%s", cmp)
	if checker := cmp.Rows[1]; checker.After.Model != "cheap-model" || checker.After.Answer != "Two numbers are wrong." {
		t.Errorf("the forked checker: %+v", checker.After)
	}
	if cheap.Calls() != 4 {
		t.Errorf("the other model answered %d calls, want 4", cheap.Calls())
	}
}

// runReview runs the review's tree on p, priced per model.
func runReview(t *testing.T, p provider.Provider) treetest.Run {
	prices, err := provider.NewPrices(map[string]provider.Price{
		"fake":        {Input: 3e-6, Output: 15e-6},
		"cheap-model": {Input: 0.25e-6, Output: 2e-6},
	})
	if err != nil {
		t.Fatal(err)
	}
	checker, err := subagent.FromReact("checker", "Checks the facts of a draft.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	editor, err := subagent.FromReact("editor", "Edits the prose of a draft.", p, nil)
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

// end of snippet

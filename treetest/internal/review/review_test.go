// snippet of docs/testing.md
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

// go test replays testdata/review.jsonl; go test -deputy.record='*' records it.
var record = cassette.RecordFlag()

func TestReview(t *testing.T) {
	// The model that records: a real one (openai.New()) in your tests; a
	// scripted one here. A replay never calls it.
	var live provider.Provider = fake.NewProvider(
		fake.Call("checker", `{"task":"the numbers"}`).For("lead"),
		fake.Text("The numbers hold.").For("checker"),
		fake.Call("editor", `{"task":"the prose"}`).For("lead"),
		fake.Text("The prose is clear.").For("editor"),
		fake.Text("The draft is ready.").For("lead"),
	)
	p := cassette.Open(t, "testdata/review.jsonl", live, *record)

	checker, err := subagent.FromReact("checker", "Checks the facts of a draft.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	editor, err := subagent.FromReact("editor", "Edits the prose of a draft.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(checker, editor))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	out, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review the draft."})
	if err != nil {
		t.Fatal(err)
	}

	// Who was called, how, and how it ended.
	tr := treetest.New(t, tree)
	tr.Nodes("checker").WithArgs(`{"task":"the numbers"}`).Count(1).
		Each(treetest.State(subagent.StateSucceeded), treetest.AnswerContains("hold"), treetest.MaxTokens(200))
	tr.Nodes("*").Count(2)

	// Scores, per node and for the run's answer.
	scorer := &treetest.Scorer{Rules: []treetest.Rule{
		{Pattern: "editor", Evaluators: []treetest.Evaluator{treetest.Contains("clear")}},
		{Evaluators: []treetest.Evaluator{treetest.Equals("The draft is ready.")}},
	}}
	if rep := scorer.Score(context.Background(), out.Answer, tree.Roots()); !rep.Passed() {
		t.Errorf("scores: %+v", rep.Scores)
	}
}

// end of snippet

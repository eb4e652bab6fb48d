package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/small.jsonl and testdata/large.jsonl, a
// cassette per model; go test -deputy.record='*' records them again from
// the example's scripted models.
var record = cassette.RecordFlag()

// The example replayed from the recordings of its own scripted run prints
// the same figures, every node priced at the model the recording names,
// with no model called; its tree holds the default child on small-1 and
// the consulted one on large-1, each within its cost.
func TestReplaysItsRecording(t *testing.T) {
	cheap, expert := script()
	small := cassette.Open(t, "testdata/small.jsonl", cheap, *record)
	large := cassette.Open(t, "testdata/large.jsonl", expert, *record)
	tree := subagent.NewTree(nil)
	var out strings.Builder
	if err := demo(context.Background(), &out, small, large, tree); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	// The figures TestAdvisor checks, whichever provider answered.
	var want strings.Builder
	if err := run(context.Background(), &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.String(), out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "the whole run: $0.020712;") {
		t.Errorf("the whole run's cost is not $0.020712:\n%s", out.String())
	}
	if *record == "" && small.LiveCalls()+large.LiveCalls() != 0 {
		t.Errorf("the replay called the models %d times", small.LiveCalls()+large.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(2).Each(treetest.State(subagent.StateSucceeded))
	tr.Nodes("*").WithArgs(`{"model":"large","task":"*"}`).Count(1).
		Each(treetest.AnswerContains("Raise the pool to 40"), treetest.MaxCost(0.0195, nil), func(n *subagent.Node) error {
			if n.Model != "large-1" {
				return fmt.Errorf("ran on %q, want large-1", n.Model)
			}
			return nil
		})
	tr.Nodes("*#0").Count(1).Each(treetest.MaxCost(0.0002, nil), treetest.MaxTokens(640))
}

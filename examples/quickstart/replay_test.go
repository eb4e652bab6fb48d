package main

import (
	"context"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/tour.jsonl; go test -deputy.record='*' records
// it again from the tour's scripted model.
var record = cassette.RecordFlag()

// The tour replayed from the recording of its own scripted run prints the
// same figures, with no model, and builds the tree the tour describes.
func TestTourReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/tour.jsonl", script(), *record)
	tree := subagent.NewTree(nil)
	var out strings.Builder
	if err := tour(context.Background(), &out, p, "provider: cassette", tree); err != nil {
		t.Fatalf("tour: %v\n%s", err, out.String())
	}
	if diff := cmp.Diff("provider: cassette\n"+tourTree, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(4)
	tr.Nodes("expert").Count(2).Each(treetest.State(subagent.StateSucceeded), treetest.MaxTokens(100))
	tr.Nodes("expert#1").Count(1).Each(treetest.AnswerContains("Building on my last answer"))
	tr.Nodes("reviewer").WithArgs(`{"task":"*"}`).Count(1).
		Each(treetest.Status("success"), treetest.AnswerContains("depth cap"), treetest.MaxTokens(200))
	tr.Nodes("delegate").WithArgs(`{"system_prompt":"You write one-line release notes.","task":"*"}`).Count(1).
		Each(treetest.State(subagent.StateSucceeded), treetest.AnswerContains("tools vanish"))
	want := `expert#0 succeeded {"task":"What is the default delegation depth?"} → "1: the top-level agent may delegate; its children may not." (26+15 tokens)
expert#1 succeeded {"task":"So what does a child see of the delegation tools?"} → "Building on my last answer (1: the top-level agent may deleg…" (60+30 tokens)
reviewer succeeded [success] {"task":"Review: 'Sub-agents can nest without limit.'"} → "{\"status\":\"success\",\"summary\":\"Wrong: nesting stops at the d…" (164+30 tokens)
delegate succeeded {"system_prompt":"You write one-line release notes.","task":"Write the note for … → "Delegation depth is capped (default 1); tools vanish at the …" (17+16 tokens)
`
	if diff := cmp.Diff(want, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

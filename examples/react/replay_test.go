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

// go test replays testdata/delegate.jsonl; go test -deputy.record='*'
// records it again from the example's scripted model.
var record = cassette.RecordFlag()

// The example replayed from the recording of its own scripted run prints
// the same figures, with no model, and its tree holds the one child the
// lead wrote, called with the prompt and task it wrote.
func TestReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/delegate.jsonl", script(), *record)
	tree := subagent.NewTree(nil)
	var out strings.Builder
	if err := demo(context.Background(), &out, p, "provider: cassette", tree); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	want := `provider: cassette
child system prompt: You are a careful editor. Count before you judge.
answer: It is: three words.
usage (requests, tokens in, tokens out): lead 2 req, 210 in, 38 out | delegate 2 req, 131 in, 15 out
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(1)
	tr.Nodes("delegate").WithArgs(`{"system_prompt":"You are a careful editor. Count before you judge.","task":"*"}`).Count(1).
		Each(treetest.State(subagent.StateSucceeded), treetest.Retries(0), treetest.AnswerContains("3 words"), treetest.MaxTokens(146))
	const dump = `delegate succeeded {"system_prompt":"You are a careful editor. Count before you judge.","task":"Is … → "Yes: 3 words." (131+15 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

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

// go test replays testdata/estimate.jsonl; go test -deputy.record='*'
// records it again from the example's scripted model.
var record = cassette.RecordFlag()

// The example replayed from the recording of its own scripted run prints
// the same figures, with no model, and its tree holds one estimator that
// the validator asked again once.
func TestReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/estimate.jsonl", script(), *record)
	tree := subagent.NewTree(nil)
	var out strings.Builder
	if err := demo(context.Background(), &out, p, "provider: cassette", tree); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	want := `provider: cassette
typed result: {Task:add a login page Hours:6}
answer: The login page needs about 6 hours.
the estimator answered: {"task":"add a login page","hours":6}
usage (requests, tokens in, tokens out): planner 2 req, 136 in, 18 out | estimator (both tries) 2 req, 180 in, 16 out
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(1)
	tr.Nodes("estimate").WithArgs(`{"task":"add a login page"}`).Count(1).
		Each(treetest.State(subagent.StateSucceeded), treetest.Retries(1), treetest.AnswerContains(`"hours":6`), treetest.MaxTokens(196))
	const dump = `estimate succeeded {"task":"add a login page"} → "{\"task\":\"add a login page\",\"hours\":6}" (retried 1) (180+16 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

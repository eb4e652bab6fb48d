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

// go test replays testdata/historian.jsonl; go test -deputy.record='*'
// records it again from the example's scripted model.
var record = cassette.RecordFlag()

// The example replayed from the recording of its own scripted run prints
// the same figures, with no model: the historian's second request, which
// holds the first exchange, is the one recorded, so its memory is too.
// Its tree holds the two consultations, in the order of the calls.
func TestReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/historian.jsonl", script(), *record)
	tree := subagent.NewTree(nil)
	var out strings.Builder
	if err := demo(context.Background(), &out, p, "provider: cassette", tree); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	want := `provider: cassette
answer: Babbage designed it; Ada Lovelace wrote its first program.
the historian remembers 4 messages
usage (requests, tokens in, tokens out): lead 3 req, 264 in, 42 out | historian 2 req, 57 in, 16 out
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(2)
	tr.Nodes("historian").Count(2).Each(treetest.State(subagent.StateSucceeded), treetest.MaxTokens(52))
	tr.Nodes("historian#1").WithArgs(`{"task":"And who wrote its first program?"}`).Count(1).
		Each(treetest.AnswerContains("Charles Babbage's engine"))
	const dump = `historian#0 succeeded {"task":"Who designed the Analytical Engine?"} → "Charles Babbage." (17+4 tokens)
historian#1 succeeded {"task":"And who wrote its first program?"} → "Ada Lovelace, for Charles Babbage's engine." (40+12 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

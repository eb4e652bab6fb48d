package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/notes.jsonl; go test -deputy.record='*'
// records it again from the example's scripted model.
var record = cassette.RecordFlag()

// The example replayed from the recording of its own scripted run, over
// the note in testdata/notes (a fixed place, so that the requests are the
// same every run), has the child read the note through the MCP server's
// tool and prints the same answer and usage, with no model; its tree
// holds the one child the lead spawned.
func TestReplaysItsRecording(t *testing.T) {
	const dir = "testdata/notes"
	p := cassette.Open(t, "testdata/notes.jsonl", script(dir+"/notes.txt"), *record)
	tree := subagent.NewTree(nil)
	var out bytes.Buffer
	if err := demo(context.Background(), &out, p, "provider: cassette", filesServer(t), dir, tree); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	want := `provider: cassette
tools from the MCP server: 1
answer: From the team's notes — The notes say: Release 1.4 ships on Thursday.
usage: lead 2 req, 735 in, 43 out | child 2 req, 238 in, 25 out
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(1)
	tr.Nodes(subagent.DefaultForkName).WithArgs(`{"task":"Read testdata/notes/notes.txt and report what it says about release 1.4."}`).Count(1).
		Each(treetest.State(subagent.StateSucceeded), treetest.AnswerContains("Release 1.4 ships on Thursday"), treetest.MaxTokens(263))
	const dump = `subagent succeeded {"task":"Read testdata/notes/notes.txt and report what it says about release 1.4… → "The notes say: Release 1.4 ships on Thursday." (238+25 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

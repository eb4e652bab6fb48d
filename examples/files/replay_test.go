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

// go test replays testdata/review.jsonl; go test -deputy.record='*'
// records it again from the example's scripted model.
var record = cassette.RecordFlag()

// The example replayed from the recording of its own scripted run loads
// the same definitions, runs the hook on the reviewer's one tool call,
// validates the reviewer's answer against its file's schema and prints
// the same answer, with no model; its tree holds the one reviewer.
func TestReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/review.jsonl", script(), *record)
	tree := subagent.NewTree(nil)
	var out strings.Builder
	if err := demo(context.Background(), &out, p, "provider: cassette", "agents", "broken", tree); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	want := `provider: cassette
loaded 2 definitions from agents:
  reviewer (reviewer.md): tools [read_file], output "file:schemas/review.json", sha256:cfee9e8e11f6…
  summarizer (summarizer.yaml): tools [], output "", sha256:db8cd5029554…
audit: reviewer calls read_file {"path":"main.go"}
validated result: map[findings:[main ignores the error of run] verdict:request_changes]
answer: The review asks for one change: handle the error of run.
`
	got, _, _ := strings.Cut(out.String(), "agentfile: ")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("output up to the broken directory's report (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "agentfile: 3 problems, nothing loaded:") {
		t.Errorf("the broken directory's report is missing:\n%s", out.String())
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(1)
	tr.Nodes("reviewer").WithArgs(`{"task":"review main.go"}`).Count(1).
		Each(treetest.State(subagent.StateSucceeded), treetest.Retries(0), treetest.MaxTokens(360), treetest.AnswerContains(`"verdict":"request_changes"`))
	tr.Nodes("summarizer").Count(0)
	const dump = `reviewer succeeded {"task":"review main.go"} → "{\"verdict\":\"request_changes\",\"findings\":[\"main ignores the e…" (334+26 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

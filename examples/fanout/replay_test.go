package main

import (
	"context"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/team.jsonl; go test -deputy.record='*' records
// it again from the example's scripted model (which waits 300-500 ms a
// researcher).
var record = cassette.RecordFlag()

// The example replayed from the recording of its own scripted run prints
// the same tokens and costs, with no model and no wait; its tree holds
// the three researchers the lead spawned from its roster, each validated
// at once (the economist's fenced answer fits) and within its cost.
func TestReplaysItsRecording(t *testing.T) {
	schema, err := jsonschema.For[Finding]()
	if err != nil {
		t.Fatal(err)
	}
	p := cassette.Open(t, "testdata/team.jsonl", script(schema.Raw()), *record)
	prices, err := fakePrices()
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	var out strings.Builder
	if err := demo(context.Background(), &out, p, "provider: cassette", prices, tree); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	masked, _ := maskWalls(t, out.String())
	if diff := cmp.Diff("provider: cassette\n"+printed, masked); diff != "" {
		t.Errorf("output, wall times masked (-want +got):\n%s", diff)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(3).Each(treetest.State(subagent.StateSucceeded), treetest.Retries(0), treetest.MaxCost(0.000714, nil))
	tr.Nodes("economist").WithArgs(`{"agent":"economist","task":"*","context":"*","output_schema":"*"}`).Count(1).
		Each(treetest.AnswerContains("90 million euros"))
	const dump = `historian succeeded {"agent":"historian","context":"The question: Should Lisbon extend its tram netw… → "{\"claim\":\"The 2018 extension of line 15 ran on time and doub…" (162+41 tokens)
economist succeeded {"agent":"economist","context":"The question: Should Lisbon extend its tram netw… → "{\"claim\":\"About 90 million euros to build, paid back in abou…" (161+49 tokens)
planner succeeded {"agent":"planner","context":"The question: Should Lisbon extend its tram networ… → "{\"claim\":\"About 18,000 riders a day, most of them new to pub…" (160+40 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/demo.jsonl; go test -deputy.record='*'
// records it again from the example's scripted models.
var record = cassette.RecordFlag()

// scripted is the example's scripted models for the demo's question as
// one provider, as a cassette records them: the resident expert's, and
// the script of the lead and its one-shot children.
func scripted() provider.Provider {
	expert := fake.NewProvider(fake.Respond(expertReply)).Loop()
	rest := leadScript("Should we use Go for the new service?")
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if agent.Name(ctx) == "expert" {
			return expert.Complete(ctx, req)
		}
		return rest.Complete(ctx, req)
	})
}

// The served endpoint, on the recording of the example's own scripted
// run, streams the demo's events, the same lines the demo prints, with no
// model; the tree the client draws from the stream holds the expert and
// the two one-shot children, with what each spent (the expert's scripted
// model reports no usage).
func TestReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/demo.jsonl", scripted(), *record)
	h, err := handler(p)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tree := subagent.NewTree(nil)
	var out strings.Builder
	out.WriteString("provider: cassette\n")
	if err := request(&out, srv.URL, tree); err != nil {
		t.Fatalf("request: %v\n%s", err, out.String())
	}
	checkDemo(t, "provider: cassette", out.String())
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(3).Each(treetest.State(subagent.StateSucceeded))
	tr.Nodes("expert").WithArgs(`{"task":"Should we use Go for the new service?"}`).Count(1).
		Each(treetest.AnswerContains("question 1 I have been asked"))
	tr.Nodes("reviewer").WithArgs(`{"system_prompt":"You review advice for hidden costs.","task":"*"}`).Count(1).
		Each(treetest.AnswerContains("retraining"), treetest.MaxTokens(38))
	tr.Nodes("researcher").Count(1).Each(treetest.MaxTokens(31))
	const dump = `expert succeeded {"task":"Should we use Go for the new service?"} → "Yes, if the team can own it. (That is question 1 I have been…" (0+0 tokens)
researcher succeeded {"task":"Collect the facts behind: Should we use Go for the new service?"} → "Three sources support it; one warns about migration cost." (16+15 tokens)
reviewer succeeded {"system_prompt":"You review advice for hidden costs.","task":"Review the expert… → "Sound advice. Hidden cost: retraining the team." (26+12 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/consult.jsonl; go test -deputy.record='*'
// records it again from the example's scripted model.
var record = cassette.RecordFlag()

// The served endpoint, on the recording of the example's own scripted
// run, answers an MCP client over streamable HTTP in-process as it did
// when recorded: the expert twice, remembering the first question, and
// the reviewer once, with structured content, with no model. The tree of
// what the server ran (its calls' events, through WithCallContext) holds
// the three invocations, with what each spent (a served call carries no
// model tool call, so no arguments).
func TestReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/consult.jsonl", script(), *record)
	tree := subagent.NewTree(nil)
	srv, err := newServer(p, nil, mcpbridge.WithCallContext(func(ctx context.Context, _ *mcp.CallToolRequest) (context.Context, error) {
		return event.WithSink(ctx, tree), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler(nil))
	defer hs.Close()
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	ask := func(name, task string) tool.Result {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"task": task})
		res, err := reg.Execute(context.Background(), []tool.Call{{ID: "1", Name: name, Arguments: args}})
		if err != nil || res[0].IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		return res[0]
	}
	got := []string{
		ask("expert", "What is a sub-agent?").Content,
		ask("expert", "Which one remembers?").Content,
	}
	want := []string{
		"Sub-agents are tools: FromAgent, FromFactory and FromReact build them.",
		"As I said before (that was question 1 of this conversation): the resident expert keeps the conversation.",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the expert's answers (-want +got):\n%s", diff)
	}
	review := ask("reviewer", "Review: the second paragraph repeats the first.")
	wantReview := map[string]any{"status": "partial", "summary": "Clear, but the second paragraph repeats the first.", "findings": map[string]any{"repeated_paragraph": float64(2)}}
	if diff := cmp.Diff(wantReview, review.Value); diff != "" {
		t.Errorf("the reviewer's structured content (-want +got):\n%s", diff)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(3).Each(treetest.State(subagent.StateSucceeded))
	tr.Nodes("expert").Count(2)
	tr.Nodes("expert#1").Count(1).Each(treetest.MaxTokens(71))
	tr.Nodes("reviewer").Count(1).Each(treetest.Status("partial"), treetest.MaxTokens(332))
	const dump = `expert#0 succeeded → "Sub-agents are tools: FromAgent, FromFactory and FromReact b…" (22+18 tokens)
expert#1 succeeded → "As I said before (that was question 1 of this conversation):…" (45+26 tokens)
reviewer succeeded [partial] → "{\"status\":\"partial\",\"summary\":\"Clear, but the second paragra…" (302+30 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

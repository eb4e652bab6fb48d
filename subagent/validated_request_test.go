package subagent

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
)

// The request a validated FromFactory child's model receives, byte for
// byte, in BenchmarkDelegation/validated's delegation: its own system
// prompt, its task followed by the answer's shape in words, and the shape
// as the response schema. Written out here rather than built from
// ReportPrompt, so that no change to how the words are put together
// changes what the model reads unnoticed.
func TestValidatedChildRequestIsPinned(t *testing.T) {
	const answer = `{"status":"success","summary":"ok"}`
	p := fake.NewProvider(
		fake.Call("child", `{"task":"count the files"}`).For("lead"),
		fake.Text("There are 3 files.").For("lead"),
		fake.Text(answer).For("child"),
	)
	sub, err := FromFactory("child", "Delegates a task.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("child"), agent.WithSystemPrompt("You count files."))
	}, WithReport())
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(sub))
	if err != nil {
		t.Fatal(err)
	}
	for run := range 2 { // the second run goes the way a benchmark's loop does
		lead.Reset()
		out, err := lead.Run(t.Context(), agent.Input{Text: "How many files?"})
		if err != nil {
			t.Fatal(err)
		}
		if out.Messages[2].Content != answer {
			t.Fatalf("the delegation did not happen as scripted: %+v", out)
		}
		reqs := p.RequestsFor("child")
		if len(reqs) != run+1 {
			t.Fatalf("%d requests of the child after %d runs, want one each", len(reqs), run+1)
		}
		if diff := cmp.Diff(pinnedValidatedRequest, reqs[run]); diff != "" {
			t.Errorf("run %d: the child's request changed (-want +got):\n%s", run, diff)
		}
		p.Add(fake.Call("child", `{"task":"count the files"}`).For("lead"), fake.Text("There are 3 files.").For("lead"), fake.Text(answer).For("child"))
	}
}

// A whole validated delegation (BenchmarkDelegation/validated's: the
// lead's two model calls, the child built, run and its answer checked
// against ReportSchema) stays within its budget: at most 40 allocations
// and 4 KB.
func TestValidatedDelegationWithinItsBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what is allocated")
	}
	const answer = `{"status":"success","summary":"ok"}`
	p := fake.NewProvider(
		fake.Call("child", `{"task":"count the files"}`).For("lead"),
		fake.Text("There are 3 files.").For("lead"),
		fake.Text(answer).For("child"),
	).Loop().DontRecord()
	opts := []agent.Option{agent.WithName("child"), agent.WithSystemPrompt("You count files.")}
	sub, err := FromFactory("child", "Delegates a task.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, opts...)
	}, WithReport())
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(sub))
	if err != nil {
		t.Fatal(err)
	}
	delegate := func() {
		lead.Reset()
		out, err := lead.Run(context.Background(), agent.Input{Text: "How many files?"})
		if err != nil || out.ChildUsage.Requests != 1 || out.Messages[2].Content != answer {
			t.Fatalf("the delegation did not happen as scripted: %+v (%v)", out, err)
		}
	}
	const runs = 200
	allocs := testing.AllocsPerRun(runs, delegate)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		delegate()
	}
	runtime.ReadMemStats(&after)
	bytes := (after.TotalAlloc - before.TotalAlloc) / runs
	if allocs > 40 || bytes > 4<<10 {
		t.Errorf("a validated delegation costs %v allocations and %d bytes; the budget is 40 and 4,096", allocs, bytes)
	}
}

// pinnedValidatedRequest is that request.
var pinnedValidatedRequest = provider.Request{
	System: "You count files.",
	Messages: []provider.Message{{Role: provider.RoleUser, Content: "count the files\n\n" +
		"When you have finished, reply with a single JSON value, and nothing else, that matches this JSON Schema:\n" +
		pinnedReportSchema + "\n" +
		` Use status "success" when the task is done, "partial" when you made progress but could not finish, ` +
		`"failed" when you could not do it; put what you found in summary, and any structured data in findings.`}},
	ResponseSchema: json.RawMessage(pinnedReportSchema),
	CacheKey:       "child",
}

const pinnedReportSchema = `{
  "type": "object",
  "properties": {
    "status": {"type": "string", "enum": ["success", "partial", "failed"]},
    "summary": {"type": "string"},
    "findings": {"type": ["object", "null"]}
  },
  "required": ["status", "summary"],
  "additionalProperties": false
}`

package agui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Models that number their calls from call_0 in every reply give a child's
// call the id of the call that started it: the stream names each call
// apart, so that a client (the official one refuses a tool call reused
// while its opener's sub-agent runs) follows the tree.
func TestCallsOfATreeAreNamedApart(t *testing.T) {
	noop := tool.Must(tool.New("noop", "Does nothing.", func(context.Context, struct{}) (string, error) { return "ok", nil }))
	m := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("done")}, nil
		}
		if req.System == "child" {
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "call_0", Name: "noop", Arguments: json.RawMessage(`{}`)})}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "call_0", Name: "kid", Arguments: json.RawMessage(`{"task":"x"}`)})}, nil
	})
	kid, err := subagent.FromFactory("kid", "Helps.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(m, agent.WithSystemPrompt("child"), agent.WithTools(noop))
	})
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(m, agent.WithTools(kid))
	if err != nil {
		t.Fatal(err)
	}
	var rec eventcheck.Recorder
	if _, err := lead.Run(event.WithSink(context.Background(), &rec), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	if problems := eventcheck.Check(rec.Events(), eventcheck.Options{}); len(problems) > 0 {
		t.Errorf("the stream breaks the client's rules: %q", problems)
	}
}

// A lead whose model numbers its calls from call_0 in every reply starts
// a background job with call_0 and, while the job runs, waits for it with
// call_0 again: the stream names each of the lead's calls apart (before,
// the wait's TOOL_CALL_START reused the id of the spawn whose sub-agent
// was still running, which a client refuses, and the job's
// SUBAGENT_STARTED named a parent call a client could not tell from the
// wait), and each result names the call it answers.
func TestALeadAndItsJobNameTheirCallsApart(t *testing.T) {
	jobID := func(req provider.Request) string {
		for _, m := range req.Messages {
			var r struct {
				JobID string `json:"job_id"`
			}
			if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.JobID != "" {
				return r.JobID
			}
		}
		return ""
	}
	lead := fake.NewProvider(
		fake.Calls(provider.ToolCall{ID: "call_0", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)}),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			return provider.Response{Message: provider.AssistantMessage("",
				provider.ToolCall{ID: "call_0", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobID(req) + `","timeout_seconds":60}`)},
				provider.ToolCall{ID: "call_1", Name: "lookup", Arguments: json.RawMessage(`{}`)})}, nil
		}),
		fake.Text("done"),
	).Named("p", "m")
	answer := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if len(req.Messages) == 1 {
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "call_0", Name: "lookup", Arguments: json.RawMessage(`{}`)})}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("found")}, nil
	}).For(subagent.DefaultForkName)
	child := fake.NewProvider(answer, answer).Named("p", "m")
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return backgroundLead(lead, child, []tool.Tool{lookupTool()})
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := aguiRunChecked(t, serve(t, h).URL, runBody("th", "r1", nil), http.StatusOK, eventcheck.Options{Background: true})
	if fin, _ := finished(t, evs); string(fin.Result) != `"done"` {
		t.Fatalf("the run answered %s", fin.Result)
	}
	named := map[string]string{} // tool call id → the tool it calls
	var job string               // the call that started the job
	results := map[string]string{}
	for _, e := range evs {
		switch e.Type {
		case event.ToolCallStart:
			if _, ok := named[e.ToolCallID]; ok {
				t.Errorf("two calls are named %q", e.ToolCallID)
			}
			named[e.ToolCallID] = e.ToolCallName
		case event.SubagentStarted:
			job = e.ParentToolCallID
		case event.ToolCallResult:
			results[e.ToolCallID] = e.Content
		}
	}
	if named[job] != subagent.SpawnToolName {
		t.Errorf("the job's sub-agent names its parent call %q, a call of %q, want the spawn", job, named[job])
	}
	for id, content := range results {
		switch named[id] {
		case subagent.JobsToolName:
			if !strings.Contains(content, "found") {
				t.Errorf("the wait's result is %q, want the job's answer", content)
			}
		case "lookup":
			if content != "nothing yet" {
				t.Errorf("a lookup's result is %q", content)
			}
		}
	}
}

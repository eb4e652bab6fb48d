package temporal

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A lead on Temporal whose model numbers its calls from call_0 in every
// reply starts a background job with call_0 and, while the job runs,
// waits for it with call_0 again: the stream names each of the lead's
// calls apart, as in process (before, the wait's TOOL_CALL_START reused
// the id of the spawn whose sub-agent still ran, which a client refuses),
// each result names the call it answers, and the lookup runs once a call
// (behind deputy.distinct-call-ids).
func TestALeadAndItsJobNameTheirCallsApartOnTemporal(t *testing.T) {
	var lookups atomic.Int64
	lookup := tool.Must(tool.New("lookup", "Looks.", func(ctx context.Context, _ struct{}) (string, error) {
		lookups.Add(1)
		return "nothing yet", nil
	}))
	reg, err := tool.NewRegistry(lookup)
	if err != nil {
		t.Fatal(err)
	}
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		if firstUserOf(req) == "dig" {
			if len(rs) == 0 {
				return provider.AssistantMessage("", provider.ToolCall{ID: "call_0", Name: "lookup", Arguments: json.RawMessage(`{}`)}), nil
			}
			return provider.AssistantMessage("found"), nil
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "call_0", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("",
				provider.ToolCall{ID: "call_0", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":600}`)},
				provider.ToolCall{ID: "call_1", Name: "lookup", Arguments: json.RawMessage(`{}`)}), nil
		}
		return provider.AssistantMessage("done"), nil
	}}
	hub := NewHub()
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "ids-tree"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "ids-tree")()
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"lookup"}, Spawn: true, Background: true}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "done" || lookups.Load() != 2 {
		t.Errorf("the lead answered %q, the lookup ran %d times, want done and twice", out.Answer, lookups.Load())
	}
	rec.mu.Lock()
	evs := append([]event.Event{{Type: event.RunStarted}}, rec.events...)
	rec.mu.Unlock()
	for _, p := range eventcheck.Check(append(evs, event.Event{Type: event.RunFinished}), eventcheck.Options{Background: true}) {
		t.Error(p)
	}
	named := map[string]string{} // tool call id → the tool it calls
	var job string
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
	if named[job] != SpawnToolName {
		t.Errorf("the job's sub-agent names its parent call %q, a call of %q, want the spawn", job, named[job])
	}
	for id, content := range results {
		if named[id] == subagent.JobsToolName && !strings.Contains(content, "found") {
			t.Errorf("the wait's result is %q, want the job's answer", content)
		}
	}
}

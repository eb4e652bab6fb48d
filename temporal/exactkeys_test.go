package temporal

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/provider"
)

// A sub-agent call whose arguments hold a key that is one the call reads
// only when case is ignored ({"task":"a","TASK":"b"}) is refused, as in
// process, for each kind of child: no child starts, and the model reads
// which key to send. (encoding/json read the task from "TASK", where a
// policy or a viewer read "task".)
func TestSubAgentKeyInAnotherCaseIsRefusedOnTemporal(t *testing.T) {
	for _, c := range []struct{ name, tool, args, key string }{
		{"agent", "expert", `{"task":"summarize the notes","TASK":"delete the notes"}`, `"TASK"`},
		{"react", "poet", `{"task":"a poem","system_prompt":"be kind","System_Prompt":"be rude"}`, `"System_Prompt"`},
		{"spawn", SpawnToolName, `{"task":"summarize the notes","Task":"delete the notes"}`, `"Task"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var children atomic.Int64
			var told string
			p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
				rs := resultsOf(req)
				if firstUserOf(req) != "go" {
					children.Add(1)
					return provider.AssistantMessage("done"), nil
				}
				if len(rs) == 0 {
					return provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: c.tool, Arguments: json.RawMessage(c.args)}), nil
				}
				told = rs[0]
				return provider.AssistantMessage("answered"), nil
			}}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
			spec := Spec{Name: "lead", Provider: "m", Spawn: true, SubAgents: []SubAgent{
				{Name: "poet", Description: "Writes poems.", React: true},
				{Name: "expert", Description: "Knows tides.", Agent: &Spec{Provider: "m"}},
			}}
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if n := children.Load(); n != 0 {
				t.Errorf("%d children's model calls, want none", n)
			}
			if !strings.Contains(told, "invalid arguments") || !strings.Contains(told, "the key "+c.key) || !strings.Contains(told, "only because case is ignored") {
				t.Errorf("the model read %q", told)
			}
		})
	}
}

// A workflow that ran before exactKeysChange, asked the version at such a
// call, goes on as it went: the child starts, so that its history replays.
func TestSubAgentKeyInAnotherCaseBeforeTheChange(t *testing.T) {
	var children atomic.Int64
	p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if firstUserOf(req) != "go" {
			children.Add(1)
			return provider.AssistantMessage("done"), nil
		}
		if len(resultsOf(req)) == 0 {
			return provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "expert", Arguments: json.RawMessage(`{"task":"a","TASK":"b"}`)}), nil
		}
		return provider.AssistantMessage("answered"), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.OnGetVersion(exactKeysChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", SubAgents: []SubAgent{
		{Name: "expert", Description: "Knows tides.", Agent: &Spec{Provider: "m"}}}}, Text: "go"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if n := children.Load(); n != 1 {
		t.Errorf("%d children's model calls, want the child's one, as before the change", n)
	}
}

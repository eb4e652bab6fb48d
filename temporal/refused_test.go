package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// A spawn past Spec.MaxSpawns is counted in RunOutput.Refused, as
// agent.Output.Refused counts it in process, whether or not the workers
// have a policy (which checks a step's calls together before they
// start); before, Refused stayed 0 on Temporal.
func TestRefusedSpawnsAreCountedOnTemporal(t *testing.T) {
	pol, err := policy.New(denyTask("nothing"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pol  *policy.Policy
	}{{"without a policy", nil}, {"with a policy", pol}} {
		t.Run(tc.name, func(t *testing.T) {
			p := fanOut(3)
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Policy: tc.pol})
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, MaxSpawns: 2}, Text: "do it"})
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if out.Refused != 1 {
				t.Errorf("RunOutput.Refused %d: want 1, the third spawn past Spec.MaxSpawns of 2", out.Refused)
			}
		})
	}
}

// A child that had a spawn refused (past Spec.MaxSpawns) and then failed, in the foreground or
// as a background job its lead waits for, still counts the refusal in its
// lead's RunOutput.Refused: its error carries the count as it carries its
// usage. Before, the count was lost with the child's output.
func TestFailedChildsRefusalsAreCountedOnTemporal(t *testing.T) {
	for _, background := range []bool{false, true} {
		for _, mode := range policyIDModes {
			t.Run(fmt.Sprint("background=", background, "/", mode.name), func(t *testing.T) {
				var n atomic.Int64
				p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
					rs := resultsOf(req)
					switch task := firstUserOf(req); {
					case task == "g":
						return provider.AssistantMessage("g done"), nil
					case task == "part 1" && len(rs) == 0:
						// Two spawns where Spec.MaxSpawns lets a run make
						// one: the second is refused, and counted.
						return provider.AssistantMessage("",
							provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"g"}`)},
							provider.ToolCall{ID: mode.id(n.Add(1), 1), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"g"}`)}), nil
					case task == "part 1":
						return provider.Message{}, &provider.Error{Provider: "m", StatusCode: http.StatusBadRequest, Kind: provider.KindBadRequest, Message: "no such model"}
					case len(rs) == 0 && background:
						return provider.AssistantMessage("", provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1","background":true}`)}), nil
					case len(rs) == 1 && background:
						return provider.AssistantMessage("", provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: subagent.JobsToolName,
							Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":60}`)}), nil
					case len(rs) == 0:
						return provider.AssistantMessage("", provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1"}`)}), nil
					}
					return provider.AssistantMessage("the part failed"), nil
				}}
				env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
				env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, MaxDepth: 2, MaxSpawns: 1}, Text: "do it"})
				var out RunOutput
				if err := env.GetWorkflowResult(&out); err != nil {
					t.Fatal(err)
				}
				if out.Answer != "the part failed" || out.Refused != 1 {
					t.Errorf("the lead answered %q, RunOutput.Refused %d: want the part failed, and its child's refused spawn counted", out.Answer, out.Refused)
				}
			})
		}
	}
}

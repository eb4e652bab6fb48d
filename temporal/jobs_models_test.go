package temporal

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// What a background job's model calls spent is in its run's usage per
// provider and model (RunOutput.Models, which RUN_FINISHED reports), as
// in process, whether the lead collects the job with a wait or the run
// settles it as it ends: every token is under its model, none left for an
// entry without one. (A job's spend was counted in ChildUsage only.)
func TestJobUsageIsUnderItsModelOnTemporal(t *testing.T) {
	for _, wait := range []bool{true, false} {
		t.Run(map[bool]string{true: "collected", false: "settled"}[wait], func(t *testing.T) {
			// Settled, the lead answers once the job's model has answered
			// it, and a moment after, as the job ends: the test
			// environment, cancelling a job whose call or end is on its
			// way, hands its parent the cancellation without what the job
			// spent, where a server hands over the job's end
			// (WaitForCancellation). The run settles the job, collected
			// by no wait.
			dug := make(chan struct{})
			m := &script{model: "m1", fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
				rs := resultsOf(req)
				if firstUserOf(req) == "dig" {
					defer close(dug)
					return provider.AssistantMessage("found it"), nil
				}
				if len(rs) == 1 && !wait {
					select {
					case <-dug:
						time.Sleep(200 * time.Millisecond)
					case <-time.After(10 * time.Second):
					}
				}
				switch {
				case len(rs) == 0:
					return provider.AssistantMessage("", provider.ToolCall{ID: "call_0", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)}), nil
				case len(rs) == 1 && wait:
					return provider.AssistantMessage("", provider.ToolCall{ID: "call_1", Name: subagent.JobsToolName,
						Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":600}`)}), nil
				}
				return provider.AssistantMessage("done"), nil
			}}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}})
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, Background: true}, Text: "go"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			_, billed := m.total()
			var models provider.Usage
			for _, mu := range out.Models {
				if mu.Model != "m1" {
					t.Errorf("an entry of the run's usage per model names %q, want m1", mu.Model)
				}
				models = models.Add(mu.Usage)
			}
			if out.TotalUsage().Tokens() != billed.Tokens() || models.Tokens() != billed.Tokens() {
				t.Errorf("the run reports %d tokens, %d of them per model %+v; the model billed %d", out.TotalUsage().Tokens(), models.Tokens(), out.Models, billed.Tokens())
			}
		})
	}
}

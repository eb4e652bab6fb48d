package temporal

import (
	"testing"

	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
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

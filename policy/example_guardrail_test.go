package policy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/subagent"
)

// snippet of docs/policy.md
// reviewed is a lead whose writer's drafts are checked before the lead
// reads them: one without a source is sent back once to be fixed, and
// one that leaks the launch date stops the whole run.
func reviewed(model *fake.Provider) (*agent.React, error) {
	cited := policy.Guardrail{Name: "cited", Stage: policy.Output, Retry: true,
		Check: func(_ context.Context, draft string) (policy.Finding, error) {
			if !strings.Contains(draft, "Source:") {
				return policy.Finding{Problem: "the draft names no source: end it with a Source: line"}, nil
			}
			return policy.Finding{}, nil
		}}
	embargo := policy.Guardrail{Name: "embargo", Stage: policy.Output,
		Check: func(_ context.Context, draft string) (policy.Finding, error) {
			if strings.Contains(draft, "launches on") {
				return policy.Finding{Problem: "the draft gives the launch date"}, nil
			}
			return policy.Finding{}, nil
		}}
	writer, err := subagent.FromReact("writer", "Writes a draft.", model, nil,
		subagent.WithGuardrails(cited, embargo))
	if err != nil {
		return nil, err
	}
	return agent.NewReact(model, agent.WithName("lead"), agent.WithTools(writer))
}

// end of snippet

// A guardrail on a sub-agent checks its answer before its parent's model
// reads it: here the first draft names no source and is sent back once,
// and the corrected one goes up. (One that gave the launch date would
// have stopped the run with a *policy.GuardrailError.)
func ExampleGuardrail() {
	model := fake.NewProvider(
		fake.Call("writer", `{"task":"Draft the note."}`).For("lead"),
		fake.Text("The product is ready.").For("writer"),
		fake.Text("The product is ready.\nSource: the release plan").For("writer"),
		fake.Text("The note is drafted.").For("lead"),
	)
	lead, err := reviewed(model)
	if err != nil {
		panic(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "Write the release note."})
	var tripped *policy.GuardrailError
	if errors.As(err, &tripped) {
		fmt.Println("stopped by", tripped.Guardrail)
		return
	}
	if err != nil {
		panic(err)
	}
	fmt.Println(len(model.RequestsFor("writer")), "drafts;", out.Answer)

	// Output:
	// 2 drafts; The note is drafted.
}

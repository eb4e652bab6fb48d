// Command factory shows one-shot delegation: each call builds a fresh agent
// from the call's arguments, and its answer is validated against a Go type.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
)

// Estimate is the answer the estimator must give.
type Estimate struct {
	Task  string `json:"task"`
	Hours int    `json:"hours" jsonschema:"minimum=1"`
}

func main() {
	model := fake.NewProvider(
		fake.Call("estimate", `{"task":"add a login page"}`).For("planner"),
		fake.Text("About a day, I think.").For("estimator"), // rejected: no JSON
		fake.Text(`{"task":"add a login page","hours":6}`).For("estimator"),
		fake.Text("The login page needs about 6 hours.").For("planner"),
	)
	fmt.Println("provider: fake (scripted replies)")

	estimate, err := subagent.FromFactory("estimate", "Estimate the hours a task takes.", nil,
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName("estimator"), agent.WithSystemPrompt("You estimate software tasks."))
		},
		subagent.OutputOf[Estimate](),
		// A Go caller gets the typed value without parsing text again.
		subagent.WithRender(func(ctx context.Context, o subagent.Outcome) (string, error) {
			if e, ok := o.Value.(Estimate); ok {
				fmt.Printf("typed result: %+v\n", e)
			}
			return o.Content, nil
		}),
	)
	if err != nil {
		log.Fatal(err)
	}

	planner, err := agent.NewReact(model, agent.WithName("planner"), agent.WithTools(estimate))
	if err != nil {
		log.Fatal(err)
	}
	out, err := planner.Run(context.Background(), agent.Input{Text: "How long for a login page?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("answer:", out.Answer)
	fmt.Println("the estimator answered:", out.Messages[2].Content)
	fmt.Println("usage: planner", out.Usage, "| estimator (both tries)", out.ChildUsage)
}

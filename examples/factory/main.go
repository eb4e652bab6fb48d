// Command factory shows one-shot delegation: each call builds a fresh agent
// from the call's arguments, and its answer is validated against a Go type.
//
// It runs on the scripted fake provider; built with -tags realmodel, on the
// model the environment names (see examples/internal/pick).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// Estimate is the answer the estimator must give.
type Estimate struct {
	Task  string `json:"task"`
	Hours int    `json:"hours" jsonschema:"minimum=1"`
}

func main() {
	if err := run(context.Background(), os.Stdout, os.Getenv); err != nil {
		log.Fatal(err)
	}
}

// run runs the example, writing to w; getenv picks the provider (see
// examples/internal/pick), the scripted fake when nothing is set.
func run(ctx context.Context, w io.Writer, getenv func(string) string) error {
	model, about, err := pick.FromEnv(getenv, script())
	if err != nil {
		return err
	}
	return demo(ctx, w, model, about, nil)
}

// script is the scripted model the example runs on without a real one.
func script() *fake.Provider {
	return fake.NewProvider(
		fake.Call("estimate", `{"task":"add a login page"}`).For("planner"),
		fake.Text("About a day, I think.").For("estimator"), // rejected: no JSON
		fake.Text(`{"task":"add a login page","hours":6}`).For("estimator"),
		fake.Text("The login page needs about 6 hours.").For("planner"),
	)
}

// demo runs the example on model, writing to w; also, when not nil, sees
// the run's events (a test's subagent.Tree).
func demo(ctx context.Context, w io.Writer, model provider.Provider, about string, also event.Sink) error {
	fmt.Fprintln(w, about)
	if also != nil {
		ctx = event.WithSink(ctx, also)
	}

	estimate, err := subagent.FromFactory("estimate", "Estimate the hours a task takes.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName("estimator"), agent.WithSystemPrompt("You estimate software tasks."))
		},
		subagent.OutputOf[Estimate](),
		subagent.WithOutcome(func(ctx context.Context, o subagent.Outcome) {
			if e, ok := o.Value.(Estimate); ok {
				fmt.Fprintf(w, "typed result: %+v\n", e)
			}
		}))
	if err != nil {
		return err
	}

	planner, err := agent.NewReact(model, agent.WithName("planner"), agent.WithTools(estimate))
	if err != nil {
		return err
	}
	out, err := planner.Run(ctx, agent.Input{Text: "How long for a login page?"})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "answer:", out.Answer)
	fmt.Fprintln(w, "the estimator answered:", out.Messages[2].Content)
	fmt.Fprintln(w, "usage (requests, tokens in, tokens out): planner", out.Usage, "| estimator (both tries)", out.ChildUsage)
	return nil
}

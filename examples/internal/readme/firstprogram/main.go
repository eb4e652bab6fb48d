// snippet of README.md
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

func main() {
	// A scripted model: each call takes the next reply meant for its agent.
	var model provider.Provider = fake.NewProvider(
		fake.Call("researcher", `{"task":"Which is the tallest mountain?"}`).For("lead"),
		fake.Text("Everest, 8,849 m above sea level.").For("researcher"),
		fake.Text("The tallest mountain is Everest (8,849 m).").For("lead"),
	)
	// A real model instead: uncomment, and import provider/openai (it reads OPENAI_API_KEY).
	// model, err := openai.New(); if err != nil { log.Fatal(err) }

	// A sub-agent is a tool: each call builds a fresh researcher and hands it the task.
	researcher, err := subagent.FromFactory("researcher", "Research one question.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName("researcher"))
		})
	if err != nil {
		log.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(researcher))
	if err != nil {
		log.Fatal(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "What is the tallest mountain?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Answer)
	fmt.Println("lead:", out.Usage, "- researcher:", out.ChildUsage)
}

// end of snippet

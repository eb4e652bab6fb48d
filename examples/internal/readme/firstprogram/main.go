// snippet of README.md
package main

import (
	"context"
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

	// The constructors fail only on a bad option; the lead calls the researcher as a tool.
	expert, _ := agent.NewReact(model, agent.WithName("researcher"))
	researcher, _ := subagent.FromAgent("researcher", "Research one question.", expert)
	lead, _ := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(researcher))
	out, err := lead.Run(context.Background(), agent.Input{Text: "What is the tallest mountain?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Answer)
	fmt.Println("lead:", out.Usage, "- researcher:", out.ChildUsage)
}

// end of snippet

// Command resident shows the resident-expert form: one agent, kept for the
// life of the tool, answers several calls and remembers the earlier ones.
package main

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

func main() {
	model := fake.NewProvider(
		fake.Call("historian", `{"task":"Who designed the Analytical Engine?"}`).For("lead"),
		fake.Text("Charles Babbage.").For("historian"),
		fake.Call("historian", `{"task":"And who wrote its first program?"}`).For("lead"),
		fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
			// The expert still has the first exchange in its conversation.
			prev := req.Messages[1].Content
			text := "Ada Lovelace, for " + strings.TrimSuffix(prev, ".") + "'s engine."
			return provider.Response{Message: provider.AssistantMessage(text), Usage: provider.Usage{InputTokens: 40, OutputTokens: 12, Requests: 1}}, nil
		}).For("historian"),
		fake.Text("Babbage designed it; Ada Lovelace wrote its first program.").For("lead"),
	)
	fmt.Println("provider: fake (scripted replies)")

	historian, err := agent.NewReact(model, agent.WithName("historian"), agent.WithSystemPrompt("You are a historian of computing."))
	if err != nil {
		log.Fatal(err)
	}
	expert, err := subagent.FromAgent("historian", "Ask a historian of computing; it remembers the conversation.", nil, historian)
	if err != nil {
		log.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(expert))
	if err != nil {
		log.Fatal(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "Tell me about the Analytical Engine."})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("answer:", out.Answer)
	fmt.Println("the historian remembers", len(historian.History()), "messages")
	fmt.Println("usage: lead", out.Usage, "| historian", out.ChildUsage)
}

// Command resident shows the resident-expert form: one agent, kept for the
// life of the tool, answers several calls and remembers the earlier ones.
//
// It runs on the scripted fake provider; built with -tags realmodel, on the
// model the environment names (see examples/internal/pick).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

func main() {
	if err := run(context.Background(), os.Stdout, os.Getenv); err != nil {
		log.Fatal(err)
	}
}

// run runs the example, writing to w; getenv picks the provider (see
// examples/internal/pick), the scripted fake when nothing is set.
func run(ctx context.Context, w io.Writer, getenv func(string) string) error {
	script := fake.NewProvider(
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
	model, about, err := pick.FromEnv(getenv, script)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, about)

	historian, err := agent.NewReact(model, agent.WithName("historian"), agent.WithSystemPrompt("You are a historian of computing."))
	if err != nil {
		return err
	}
	expert, err := subagent.FromAgent("historian", "Ask a historian of computing; it remembers the conversation.", historian)
	if err != nil {
		return err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(expert))
	if err != nil {
		return err
	}
	out, err := lead.Run(ctx, agent.Input{Text: "Tell me about the Analytical Engine."})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "answer:", out.Answer)
	fmt.Fprintln(w, "the historian remembers", len(historian.History()), "messages")
	fmt.Fprintln(w, "usage (requests, tokens in, tokens out): lead", out.Usage, "| historian", out.ChildUsage)
	return nil
}

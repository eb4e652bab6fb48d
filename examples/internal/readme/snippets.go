// Package readme holds the Go code that README.md quotes, so that every
// snippet a reader pastes compiles and passes go vet. The test checks that
// the README's Go blocks are these snippets, in order.
//
// A snippet is the text between a line "// README snippet" and the next line
// "// end of README snippet", unindented.
package readme

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// README snippet
// delegate gives a lead agent the three kinds of sub-agent and runs it.
func delegate(ctx context.Context, model provider.Provider, expertAgent agent.Agent, tools *tool.Registry) error {
	// A resident expert: one agent, kept for the life of the tool; its
	// conversation accumulates, its calls take turns.
	expert, err := subagent.FromAgent("expert", "Ask the maintainer.", nil, expertAgent)
	if err != nil {
		return err
	}

	// One-shot delegation: a fresh agent per call, built from the call's
	// arguments, its answer validated against ResultSchema (the tool tells the
	// child that shape).
	reviewer, err := subagent.FromFactory("reviewer", "Review a text.", nil,
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithSystemPrompt("You review texts for errors."))
		},
		subagent.WithResult())
	if err != nil {
		return err
	}

	// The model defines the child: its system prompt and task come from the call.
	child, err := subagent.FromReact("delegate", "Start a sub-agent.", model, tools, nil)
	if err != nil {
		return err
	}

	lead, err := agent.NewReact(model, agent.WithTools(expert, reviewer, child))
	if err != nil {
		return err
	}
	out, err := lead.Run(ctx, agent.Input{Text: "Write the release note."})
	if err != nil {
		return err
	}
	fmt.Println(out.Answer, out.Usage, out.ChildUsage)
	return nil
}

// end of README snippet

// README snippet
// watch runs lead twice, receiving its events: through a sink in the
// context, then by ranging over the run (stopping early cancels it).
func watch(ctx context.Context, lead agent.Agent) error {
	sinkCtx := event.WithSink(ctx, event.SinkFunc(func(e event.Event) { log.Println(e.Type) }))
	if _, err := lead.Run(sinkCtx, agent.Input{Text: "Write the release note."}); err != nil {
		return err
	}

	for e, err := range agent.Stream(ctx, lead, agent.Input{Text: "Write the release note."}) {
		if err != nil {
			return err
		}
		log.Println(e.Type, e.Delta)
	}
	return nil
}

// end of README snippet

// README snippet
// serve serves a fresh lead agent per AG-UI conversation at /agui.
func serve(buildLead func() (agent.Agent, error)) error {
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return buildLead() // the agent is handed the conversation, in.Messages
	})
	if err != nil {
		return err
	}
	http.Handle("/agui", h)
	return http.ListenAndServe("localhost:8080", nil)
}

// end of README snippet

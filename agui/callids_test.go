package agui_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Models that number their calls from call_0 in every reply give a child's
// call the id of the call that started it: the stream names each call
// apart, so that a client (the official one refuses a tool call reused
// while its opener's sub-agent runs) follows the tree.
func TestCallsOfATreeAreNamedApart(t *testing.T) {
	noop := tool.Must(tool.New("noop", "Does nothing.", func(context.Context, struct{}) (string, error) { return "ok", nil }))
	m := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("done")}, nil
		}
		if req.System == "child" {
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "call_0", Name: "noop", Arguments: json.RawMessage(`{}`)})}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "call_0", Name: "kid", Arguments: json.RawMessage(`{"task":"x"}`)})}, nil
	})
	kid, err := subagent.FromFactory("kid", "Helps.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(m, agent.WithSystemPrompt("child"), agent.WithTools(noop))
	})
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(m, agent.WithTools(kid))
	if err != nil {
		t.Fatal(err)
	}
	var rec eventcheck.Recorder
	if _, err := lead.Run(event.WithSink(context.Background(), &rec), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	if problems := eventcheck.Check(rec.Events(), eventcheck.Options{}); len(problems) > 0 {
		t.Errorf("the stream breaks the client's rules: %q", problems)
	}
}

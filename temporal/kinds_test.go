package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// The lead calls a plain tool, a react sub-agent, a fixed sub-agent and a
// factory in one turn; each answer comes back to it, with the children's usage.
func TestEveryKindOfCall(t *testing.T) {
	type addIn struct{ A, B int }
	add, err := tool.New("add", "Adds two numbers.", func(ctx context.Context, in addIn) (int, error) { return in.A + in.B, nil })
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(add)
	if err != nil {
		t.Fatal(err)
	}
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case req.System == "you are a poet":
			return provider.AssistantMessage("poem about " + last.Content), nil
		case req.System == "fixed expert":
			return provider.AssistantMessage("expert on " + last.Content), nil
		case last.Role == provider.RoleTool:
			var parts []string
			for _, m := range req.Messages {
				if m.Role == provider.RoleTool {
					parts = append(parts, m.Content)
				}
			}
			return provider.AssistantMessage(strings.Join(parts, " | ")), nil
		default:
			if len(req.Tools) != 4 || req.Tools[0].Description != "Adds two numbers." {
				return provider.Message{}, fmt.Errorf("the lead was not offered the four tools with their definitions: %+v", req.Tools)
			}
			return provider.AssistantMessage("",
				provider.ToolCall{ID: "1", Name: "add", Arguments: json.RawMessage(`{"A":2,"B":3}`)},
				provider.ToolCall{ID: "2", Name: "poet", Arguments: json.RawMessage(`{"system_prompt":"you are a poet","task":"rain"}`)},
				provider.ToolCall{ID: "3", Name: "expert", Arguments: json.RawMessage(`{"task":"tides"}`)},
				provider.ToolCall{ID: "4", Name: "counter", Arguments: json.RawMessage(`{"word":"abc"}`)},
				provider.ToolCall{ID: "5", Name: "poet", Arguments: json.RawMessage(`{"system_prompt":"x"}`)},
			), nil
		}
	}}
	factory := func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		if agent.Depth(ctx) != 1 {
			return nil, errors.New("factory agent does not run at depth 1")
		}
		return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
			return agent.Output{Answer: "counted " + in.Text, Usage: provider.Usage{InputTokens: 7, Requests: 1}}, nil
		}), nil
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: reg, Factories: map[string]subagent.Factory{"count": factory}})
	spec := Spec{Provider: "m", Tools: []string{"add"}, SubAgents: []SubAgent{
		{Name: "poet", Description: "Writes poems.", React: true},
		{Name: "expert", Description: "Knows tides.", Agent: &Spec{Provider: "m", System: "fixed expert"}},
		{Name: "counter", Description: "Counts.", Factory: "count", Params: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}}}`)},
	}}
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(out.Answer, " | ")
	if len(parts) != 5 || parts[0] != "5" || parts[1] != "poem about rain" || parts[2] != "expert on tides" ||
		parts[3] != `counted {"word":"abc"}` || !strings.Contains(parts[4], "non-empty \"task\"") {
		t.Fatalf("answer %q", out.Answer)
	}
	_, total := p.total()
	if want := total.Add(provider.Usage{InputTokens: 7, Requests: 1}); out.TotalUsage() != want {
		t.Fatalf("usage %v, want %v", out.TotalUsage(), want)
	}
}

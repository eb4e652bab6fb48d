package agui_test

import (
	"context"
	"encoding/json"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// lookupTool is a tool "lookup" that finds "nothing yet".
func lookupTool() tool.Tool {
	return tool.Func{Def: tool.Definition{Name: "lookup", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "nothing yet"}, nil }}
}

// backgroundLead returns a lead named "lead" on model whose registry holds
// tools, a spawner of background children on child (which reach the same
// registry) and the spawner's jobs tool.
func backgroundLead(model, child provider.Provider, tools []tool.Tool, opts ...agent.Option) (agent.Agent, error) {
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		return nil, err
	}
	sp, err := subagent.NewSpawner(child, reg, subagent.WithBackground())
	if err != nil {
		return nil, err
	}
	if err := reg.Register(sp); err != nil {
		return nil, err
	}
	if err := reg.Register(sp.JobsTool()); err != nil {
		return nil, err
	}
	return agent.NewReact(model, append([]agent.Option{agent.WithName("lead"), agent.WithRegistry(reg)}, opts...)...)
}

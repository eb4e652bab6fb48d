package policy_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// snippet of docs/policy.md
// guarded is a lead with a policy, and a researcher it delegates to.
func guarded() (*agent.React, error) {
	model := fake.NewProvider(
		fake.Call("researcher", `{"task":"clean up the logs"}`).For("lead"),
		fake.Call("shell", `{"cmd":"rm -rf /var/log"}`).For("researcher"),
		fake.Text("I may not run shell.").For("researcher"),
		fake.Text("The researcher could not clean up.").For("lead"),
	)
	shell := tool.Func{
		Def: tool.Definition{Name: "shell", Description: "Runs a command.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn:  func(context.Context, tool.Call) (tool.Result, error) { panic("never runs") },
	}
	researcher, err := subagent.FromFactory("researcher", "Researches.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("researcher"), agent.WithTools(shell))
	})
	if err != nil {
		return nil, err
	}
	p, err := policy.New(
		policy.DenyTools("no-shell", policy.AnyDepth, "shell"),
		policy.Redact("secrets", []string{"sk-live-123"}),
	)
	if err != nil {
		return nil, err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(researcher), agent.WithPolicy(p))
	if err != nil {
		return nil, err
	}
	return lead, nil
}

// end of snippet

// A policy set on the lead binds its sub-agent: the child's call to a
// denied tool never runs, and the lead's Output says which rule denied it.
func Example() {
	lead, err := guarded()
	if err != nil {
		panic(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "Clean up; the key is sk-live-123."})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Answer)
	for _, d := range out.Denials {
		fmt.Printf("%s denied %s at %s\n", d.Rule, d.Tool, d.Path)
	}

	// Output:
	// The researcher could not clean up.
	// no-shell denied shell at lead/researcher
}

package fake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Each call takes the next reply of the script; the provider records what
// it was asked.
func ExampleNewProvider() {
	p := fake.NewProvider(
		fake.Call("search", `{"q":"capital of Portugal"}`),
		fake.Text("Lisbon."),
	)
	ctx := context.Background()
	req := provider.Request{Messages: []provider.Message{provider.UserMessage("What is the capital of Portugal?")}}
	for range 3 {
		resp, err := p.Complete(ctx, req)
		switch {
		case errors.Is(err, fake.ErrScriptExhausted):
			fmt.Println("exhausted")
		case len(resp.Message.ToolCalls) > 0:
			c := resp.Message.ToolCalls[0]
			fmt.Println("call", c.Name, string(c.Arguments), resp.StopReason, strings.HasPrefix(c.ID, "call_"))
		default:
			fmt.Println("text", resp.Message.Content, resp.Usage)
		}
	}
	fmt.Println(p.Calls(), "calls,", len(p.Requests()), "recorded,", p.Remaining(), "left")
	// Output:
	// call search {"q":"capital of Portugal"} tool_use true
	// text Lisbon. 1 req, 8 in, 2 out
	// exhausted
	// 3 calls, 3 recorded, 0 left
}

// One script for a parent and its sub-agent: replies marked For an agent
// name go only to the agent of that name.
func ExampleReply_For() {
	p := fake.NewProvider(
		fake.Call("ask_researcher", `{"task":"find X"}`).For("lead"),
		fake.Text("X is 42").For("researcher"),
		fake.Text("The answer is 42.").For("lead"),
	)
	researcher, err := agent.NewReact(p, agent.WithName("researcher"))
	if err != nil {
		panic(err)
	}
	ask := askTool(researcher)
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(ask))
	if err != nil {
		panic(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "What is X?"})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Answer)
	for _, r := range p.Requests() {
		fmt.Println(r.Agent, "asked with", len(r.Messages), "messages")
	}
	// Output:
	// The answer is 42.
	// lead asked with 1 messages
	// researcher asked with 1 messages
	// lead asked with 3 messages
}

// Stream passes on the reply in pieces, then returns the whole of it.
func ExampleProvider_Stream() {
	p := fake.NewProvider(fake.Text("It is sunny."))
	resp, err := p.Stream(context.Background(), provider.Request{}, func(d provider.Delta) error {
		fmt.Printf("%q\n", d.Text)
		return nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("done: %q\n", resp.Message.Content)
	// Output:
	// "It "
	// "is "
	// "sunny."
	// done: "It is sunny."
}

// A call with no reply left fails with an error naming the call, never a
// panic.
func ExampleErrScriptExhausted() {
	p := fake.NewProvider(fake.Text("only for the writer").For("writer"))
	editor, _ := agent.NewReact(p, agent.WithName("editor"))
	_, err := editor.Run(context.Background(), agent.Input{Text: "Review this."})
	fmt.Println(err)
	// Output: agent "editor": fake: script exhausted: call 1 by agent "editor" (last message: "Review this.") has no reply left (replies are left only for "writer" (1)): add one to the script
}

// askTool exposes an agent to a model as a tool taking the task as JSON.
func askTool(a agent.Agent) tool.Tool {
	return tool.Func{
		Def: tool.Definition{Name: "ask_researcher", Description: "Asks the researcher.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			out, err := a.Run(ctx, agent.Input{Text: string(c.Arguments)})
			return tool.Result{Content: out.Answer, Usage: out.TotalUsage()}, err
		},
	}
}

// A provider that accounts for Anthropic's prompt cache shows what a
// resident agent's repeated conversation costs: from the second question
// on, the prefix it re-sends is read from the cache.
func ExampleProvider_PromptCache() {
	p := fake.NewProvider(fake.Text("Noted.")).Loop().PromptCache(fake.AnthropicCache)
	a, _ := agent.NewReact(p, agent.WithSystemPrompt(strings.Repeat("You keep the team's records. ", 200)))
	for _, q := range []string{"First question?", "Second question?"} {
		out, _ := a.Run(context.Background(), agent.Input{Text: q})
		u := out.Usage
		fmt.Printf("input %d, read from the cache %d, written %d\n", u.InputTokens, u.CacheReadTokens, u.CacheWriteTokens)
	}
	// Output:
	// input 1454, read from the cache 0, written 1453
	// input 1460, read from the cache 1453, written 6
}

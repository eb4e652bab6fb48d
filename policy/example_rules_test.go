package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// echoTool is a tool that answers with its arguments and counts its calls.
func echoTool(name string, calls *int) tool.Tool {
	return tool.Func{
		Def: tool.Definition{Name: name, Description: "Does " + name + ".", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
			*calls++
			return tool.Result{Content: name + " " + string(c.Arguments)}, nil
		},
	}
}

// A secret the lead was given reaches no child: the task the lead hands
// down is redacted before the researcher's model reads it.
func ExampleRedact() {
	model := fake.NewProvider(
		fake.Call("researcher", `{"task":"Check the account with key sk-live-123."}`).For("lead"),
		fake.Text("The account is active.").For("researcher"),
		fake.Text("It is active.").For("lead"),
	)
	expert, _ := agent.NewReact(model, agent.WithName("researcher"))
	researcher, _ := subagent.FromAgent("researcher", "Researches.", expert)
	p, _ := policy.New(policy.Redact("secrets", []string{"sk-live-123"}))
	lead, _ := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(researcher), agent.WithPolicy(p))
	out, err := lead.Run(context.Background(), agent.Input{Text: "Is my account active? My key is sk-live-123."})
	if err != nil {
		panic(err)
	}
	for _, req := range model.RequestsFor("researcher") {
		for _, m := range req.Messages {
			fmt.Printf("the researcher read: %s\n", m.Content)
		}
	}
	fmt.Println("answer:", out.Answer)

	// Output:
	// the researcher read: Check the account with key [REDACTED].
	// answer: It is active.
}

// A tool named in AskBefore is asked about before it runs, at any depth:
// the run stops with the question, attributed to the sub-agent that made
// the call, and the tool has not run. (tool.Resume with the answer goes
// on, as for tool.RequireApproval.)
func ExampleAskBefore() {
	model := fake.NewProvider(
		fake.Call("clerk", `{"task":"Pay the invoice."}`).For("lead"),
		fake.Call("pay", `{"amount":120}`).For("clerk"),
	)
	paid := 0
	child, _ := agent.NewReact(model, agent.WithName("clerk"), agent.WithTools(echoTool("pay", &paid)))
	clerk, _ := subagent.FromAgent("clerk", "Handles invoices.", child)
	p, _ := policy.New(policy.AskBefore("payments", "pay"))
	lead, _ := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(clerk), agent.WithPolicy(p))
	_, err := lead.Run(context.Background(), agent.Input{Text: "Settle the invoice."})
	var asked *tool.Interrupted
	if !errors.As(err, &asked) {
		panic(err)
	}
	for _, q := range asked.Interrupts {
		fmt.Printf("%s: %s\n", q.Reason, q.Message)
	}
	fmt.Println("payments made:", paid)

	// Output:
	// tool_approval: Policy "payments": Allow lead/clerk to call pay with {"amount":120}?
	// payments made: 0
}

// An allow list at depth 1 lets the lead's sub-agents call only the
// tools it names, and a deny list at any depth takes one away from
// everyone: the calls they deny never run, and the model reads why.
func ExampleAllowTools() {
	model := fake.NewProvider(
		fake.Call("worker", `{"task":"Tidy the notes."}`).For("lead"),
		fake.Calls(
			toolCall("read_notes", `{}`),
			toolCall("write_notes", `{"text":"tidy"}`),
			toolCall("delete_notes", `{}`),
		).For("worker"),
		fake.Text("I could only read them.").For("worker"),
		fake.Text("The notes were read, not changed.").For("lead"),
	)
	var reads, writes, deletes int
	// One call at a time, so that the denials are printed in the order
	// the model wrote the calls.
	child, _ := agent.NewReact(model, agent.WithName("worker"), agent.WithParallelism(1), agent.WithTools(
		echoTool("read_notes", &reads), echoTool("write_notes", &writes), echoTool("delete_notes", &deletes)))
	worker, _ := subagent.FromAgent("worker", "Works on notes.", child)
	p, _ := policy.New(
		policy.AllowTools("read-only", 1, "read_*", "delete_*"),
		policy.DenyTools("no-delete", policy.AnyDepth, "delete_*"),
	)
	lead, _ := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(worker), agent.WithPolicy(p))
	out, err := lead.Run(context.Background(), agent.Input{Text: "Tidy my notes."})
	if err != nil {
		panic(err)
	}
	for _, d := range out.Denials {
		fmt.Printf("%s denied %s at %s: %s\n", d.Rule, d.Tool, d.Path, d.Reason)
	}
	fmt.Printf("calls run: read %d, write %d, delete %d\n", reads, writes, deletes)

	// Output:
	// read-only denied write_notes at lead/worker: write_notes is not among the tools allowed here (read_*, delete_*)
	// no-delete denied delete_notes at lead/worker: delete_notes is not allowed here
	// calls run: read 1, write 0, delete 0
}

// PathUnder keeps a path argument under a directory, whatever "../" the
// model writes: the call that climbs out is denied and never runs.
func ExamplePathUnder() {
	model := fake.NewProvider(
		fake.Calls(
			toolCall("read_file", `{"path":"notes/todo.txt"}`),
			toolCall("read_file", `{"path":"notes/../../etc/passwd"}`),
		).For("lead"),
		fake.Text("I read the to-do list.").For("lead"),
	)
	reads := 0
	p, _ := policy.New(policy.PathUnder("workspace", "read_*", "path", "/srv/workspace"))
	lead, _ := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(echoTool("read_file", &reads)), agent.WithPolicy(p))
	out, err := lead.Run(context.Background(), agent.Input{Text: "Read my to-do list."})
	if err != nil {
		panic(err)
	}
	for _, d := range out.Denials {
		fmt.Printf("%s denied %s: %s\n", d.Rule, d.Tool, d.Reason)
	}
	fmt.Println("files read:", reads)

	// Output:
	// workspace denied read_file: its argument "path", /srv/etc/passwd, is not under /srv/workspace
	// files read: 1
}

func toolCall(name, args string) provider.ToolCall {
	return provider.ToolCall{Name: name, Arguments: json.RawMessage(args)}
}

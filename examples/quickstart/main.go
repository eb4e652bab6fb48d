// Command quickstart is deputy's tour. A lead agent
//
//   - consults a resident expert twice, and the second answer builds on the
//     first (FromAgent);
//   - hands a one-shot review to a freshly built agent whose answer is
//     checked against ReportSchema (FromFactory with WithReport);
//   - lets the model define a sub-agent itself, its system prompt and task
//     (FromReact);
//
// then prints who called whom, with each node's usage.
//
// It runs on the scripted fake provider, so it needs no key and no network.
// Built with -tags realmodel, it runs on the model the environment names:
//
//	OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=qwen3 go run -tags realmodel ./examples/quickstart
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
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

// run takes the tour, writing to w; getenv picks the provider (see
// examples/internal/pick), the scripted fake when nothing is set.
func run(ctx context.Context, w io.Writer, getenv func(string) string) error {
	model, about, err := pick.FromEnv(getenv, script())
	if err != nil {
		return err
	}
	return tour(ctx, w, model, about, nil)
}

// tour takes the tour on model, writing to w; also, when not nil, sees
// the run's events too (a test's subagent.Tree).
func tour(ctx context.Context, w io.Writer, model provider.Provider, about string, also event.Sink) error {
	fmt.Fprintln(w, about)

	tree := newTree()
	tree.next = also
	record := subagent.WithOutcome(tree.record)

	// A resident expert: one agent whose conversation lasts across calls.
	expertAgent, err := agent.NewReact(model, agent.WithName("expert"),
		agent.WithSystemPrompt("You are deputy's maintainer. Answer questions about deputy briefly."))
	if err != nil {
		return err
	}
	expert, err := subagent.FromAgent("expert", "Ask deputy's maintainer a question. It remembers earlier questions.", expertAgent, record)
	if err != nil {
		return err
	}

	// One-shot delegation: a fresh reviewer per call, its answer validated
	// (the tool tells the reviewer the shape of the result).
	reviewer, err := subagent.FromFactory("reviewer", "Review a text and report problems as a structured result.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName("reviewer"), agent.WithSystemPrompt("You review texts for errors."))
		},
		subagent.WithReport(), subagent.WithInputFromArgs(taskText), record)
	if err != nil {
		return err
	}

	// The model defines the sub-agent: system prompt and task come from the call.
	delegate, err := subagent.FromReact("delegate", "Start a sub-agent with a system prompt and a task of your choosing.", model, nil, record)
	if err != nil {
		return err
	}

	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(expert, reviewer, delegate),
		agent.WithSystemPrompt("You coordinate specialists to answer the user."))
	if err != nil {
		return err
	}
	ctx = event.WithSink(ctx, tree)
	out, err := lead.Run(ctx, agent.Input{Text: "Prepare the release note for deputy's depth limit."})
	if err != nil {
		return err
	}
	tree.print(w, "lead (own calls only)", out.Usage)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "answer:", out.Answer)
	t := out.TotalUsage()
	fmt.Fprintf(w, "total, all agents: %d requests, %d tokens in, %d tokens out\n", t.Requests, t.InputTokens, t.OutputTokens)
	return nil
}

// taskText hands the reviewer the task field rather than the JSON.
func taskText(args json.RawMessage) (agent.Input, error) {
	var a struct {
		Task string `json:"task"`
	}
	err := json.Unmarshal(args, &a)
	return agent.Input{Text: a.Task}, err
}

// script is what the fake model says, agent by agent.
func script() *fake.Provider {
	return fake.NewProvider(
		fake.Call("expert", `{"task":"What is the default delegation depth?"}`).For("lead"),
		fake.Text("1: the top-level agent may delegate; its children may not.").For("expert"),

		fake.Call("expert", `{"task":"So what does a child see of the delegation tools?"}`).For("lead"),
		// The expert's second answer builds on its first, which it still has.
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			first := req.Messages[1].Content // its own earlier answer
			text := "Building on my last answer (" + strings.TrimSuffix(first, ".") + "): at the cap the tools are not offered, so a child never sees them."
			return provider.Response{Message: provider.AssistantMessage(text), Usage: provider.Usage{InputTokens: 60, OutputTokens: 30, Requests: 1}}, nil
		}).For("expert"),

		fake.Call("reviewer", `{"task":"Review: 'Sub-agents can nest without limit.'"}`).For("lead"),
		fake.Text("```json\n{\"status\":\"success\",\"summary\":\"Wrong: nesting stops at the depth cap (default 1).\",\"findings\":{\"line\":1}}\n```").For("reviewer"),

		fake.Call("delegate", `{"system_prompt":"You write one-line release notes.","task":"Write the note for the depth cap."}`).For("lead"),
		fake.Text("Delegation depth is capped (default 1); tools vanish at the cap.").For("delegate"),

		fake.Text("Release note: Delegation depth is capped (default 1); at the cap, delegation tools vanish.").For("lead"),
	)
}

// tree records who called whom from the SUBAGENT_* events, and each call's
// usage from the render hook.
type tree struct {
	mu       sync.Mutex
	children map[string][]string // parent sub-agent run id ("" for the lead) → children
	names    map[string]string
	usage    map[string]provider.Usage
	result   map[string]string
	next     event.Sink // sees every event too; nil for none
}

func newTree() *tree {
	return &tree{children: map[string][]string{}, names: map[string]string{}, usage: map[string]provider.Usage{}, result: map[string]string{}}
}

// Emit implements event.Sink.
func (t *tree) Emit(e event.Event) {
	if t.next != nil {
		t.next.Emit(e)
	}
	if e.Type != event.SubagentStarted {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.children[e.ParentSubagentRunID] = append(t.children[e.ParentSubagentRunID], e.SubagentRunID)
	t.names[e.SubagentRunID] = e.Name
}

func (t *tree) record(ctx context.Context, o subagent.Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.usage[o.RunID] = o.Usage
	summary := o.Output.Answer
	if r, ok := o.Value.(subagent.Report); ok {
		summary = "status=" + string(r.Status) + ": " + r.Summary
	}
	t.result[o.RunID] = summary
}

// print writes the tree, one line per agent with the usage of its own model
// calls: a node's children are on their own lines.
func (t *tree) print(w io.Writer, root string, usage provider.Usage) {
	fmt.Fprintf(w, "%-30s %8s %10s %11s\n", "agent", "requests", "tokens in", "tokens out")
	row(w, root, usage)
	t.printChildren(w, "", "")
}

func row(w io.Writer, name string, u provider.Usage) {
	fmt.Fprintf(w, "%-30s %8d %10d %11d\n", name, u.Requests, u.InputTokens, u.OutputTokens)
}

func (t *tree) printChildren(w io.Writer, parent, indent string) {
	kids := t.children[parent]
	for i, id := range kids {
		branch, next := "├─ ", "│  "
		if i == len(kids)-1 {
			branch, next = "└─ ", "   "
		}
		row(w, indent+branch+t.names[id], t.usage[id])
		fmt.Fprintf(w, "%s%s   ↳ %s\n", indent, next, clip(t.result[id], 70))
		t.printChildren(w, id, indent+next)
	}
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

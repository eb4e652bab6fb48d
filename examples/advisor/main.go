// Command advisor shows the advisor shape: a lead on a cheap model that
// does the routine part of a task itself, or on cheap sub-agents, and
// consults a stronger, dearer model only for the hard part. The spawn
// tool offers the lead a model menu (subagent.WithModelMenu): each model
// under a name, described to the lead with what it costs; a fork that
// names no model runs on the cheap one (subagent.WithDefaultModel). It
// prints the run tree with each node's model and cost, every node priced
// at its own model's prices, and what the run cost in all.
//
// It runs on scripted fake models with made-up prices (deputy ships no
// prices), so it needs no key and no network.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

const question = "Our checkout service times out under load about once a week. What should we change first?"

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run runs the example, writing to w.
func run(ctx context.Context, w io.Writer) error {
	cheap, expert := script()
	return demo(ctx, w, cheap, expert, nil)
}

// demo runs the example on the cheap and the expert models, writing to w;
// also, when not nil, sees the run's events (a test's subagent.Tree).
func demo(ctx context.Context, w io.Writer, cheap, expert provider.Provider, also event.Sink) error {
	// Made-up prices, a dollar amount per token: not any vendor's.
	prices, err := provider.NewPrices(map[string]provider.Price{
		"acme/small-1": {Input: 0.25e-6, Output: 1.25e-6},
		"acme/large-1": {Input: 15e-6, Output: 75e-6},
	})
	if err != nil {
		return err
	}
	lead, err := advisor(cheap, expert, prices)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "provider: fake (scripted replies), made-up prices a million tokens in/out: small-1 $0.25/$1.25, large-1 $15/$75")
	fmt.Fprintln(w, "the lead reads, in the spawn tool's model argument:")
	fmt.Fprintln(w, "  "+modelArgument(lead))

	tree := subagent.NewTree(also)
	out, err := lead.Run(event.WithSink(ctx, tree), agent.Input{Text: question})
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "lead      small-1   own %d in, %d out  $%.6f\n", out.Usage.InputTokens, out.Usage.OutputTokens, out.Cost-childCost(tree.Roots()))
	for i, n := range tree.Roots() {
		branch := "├─"
		if i == len(tree.Roots())-1 {
			branch = "└─"
		}
		var a struct {
			Task  string `json:"task"`
			Model string `json:"model"`
		}
		_ = json.Unmarshal(n.Arguments, &a)
		if a.Model == "" {
			a.Model = "(default)"
		}
		u := n.TotalUsage()
		dollars, _ := n.Cost(nil) // as its events carried it: at its own model's prices
		fmt.Fprintf(w, "%s %-9s %-9s %d in, %d out  $%.6f  model %s  %q\n", branch, n.State, n.Model, u.InputTokens, u.OutputTokens, dollars, a.Model, a.Task)
	}
	fmt.Fprintf(w, "the whole run: $%.6f", out.Cost)
	if large, ok := prices.Lookup("acme", "large-1"); ok {
		fmt.Fprintf(w, "; on large-1 throughout, the same tokens would cost $%.6f", large.Cost(out.Usage.Add(out.ChildUsage)))
	}
	fmt.Fprint(w, "\n\n")
	fmt.Fprintln(w, "answer:", out.Answer)
	return nil
}

// snippet of docs/cost.md
// advisor returns a lead on the cheap model whose spawn tool offers two
// models: "small" (the lead's own, the default) and "large", on its own
// provider. Both are priced from prices, which the lead reports its
// tree's costs at.
func advisor(cheap, expert provider.Provider, prices *provider.Prices) (*agent.React, error) {
	tools, err := tool.NewRegistry()
	if err != nil {
		return nil, err
	}
	spawner, err := subagent.NewSpawner(cheap, tools,
		subagent.WithModelMenu(prices,
			subagent.ModelChoice{Name: "small", Model: "small-1"},
			subagent.ModelChoice{Name: "large", Provider: expert, Model: "large-1"},
		),
		subagent.WithDefaultModel("small"),
	)
	if err != nil {
		return nil, err
	}
	if err := tools.Register(spawner); err != nil {
		return nil, err
	}
	return agent.NewReact(cheap, agent.WithName("lead"), agent.WithModel("small-1"),
		agent.WithRegistry(tools), agent.WithPrices(prices),
		agent.WithSystemPrompt("Do routine work on small sub-agents; consult large only for judgement you cannot make well."))
}

// end of snippet

// modelArgument is what the spawn tool tells the lead about its model
// argument.
func modelArgument(lead *agent.React) string {
	for _, t := range lead.Tools().Tools() {
		d := t.Definition()
		if d.Name != subagent.SpawnToolName {
			continue
		}
		var s struct {
			Properties struct {
				Model struct {
					Description string `json:"description"`
				} `json:"model"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(d.Parameters, &s)
		return s.Properties.Model.Description
	}
	return ""
}

func childCost(nodes []*subagent.Node) float64 {
	var sum float64
	for _, n := range nodes {
		c, _ := n.Cost(nil)
		sum += c
	}
	return sum
}

// script returns the two fake models: the cheap one answers as the lead
// and as its default sub-agents, the expert as the sub-agent the lead
// consults.
func script() (cheap, expert *fake.Provider) {
	spawn := func(args string) provider.ToolCall {
		return provider.ToolCall{Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}
	}
	use := func(in, out int64) provider.Usage {
		return provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
	}
	cheap = fake.NewProvider(
		fake.Calls(
			spawn(`{"task":"Summarize last month's checkout timeouts from the incident notes: when, how long, what was saturated.","context":"Incident notes: 4 timeouts, all between 12:00 and 12:15, database connection pool at its limit of 20 each time."}`),
			spawn(`{"task":"Judge the trade-off: raise the connection pool, add a read replica, or queue the writes? Pick one first step and say why.","context":"Checkout does 3 reads and 1 write per order; peak is 40 orders a second at lunch.","model":"large"}`),
		).WithUsage(use(1200, 180)).For("lead"),
		fake.Respond(answer).For("lead"),
		fake.Text("Four timeouts, each 12:00-12:15, each with the 20-connection pool full.").WithUsage(use(600, 40)).For(subagent.DefaultForkName),
	).Named("acme", "small-1")
	expert = fake.NewProvider(
		fake.Text("Raise the pool to 40 first: 40 orders a second at 4 queries of about 10 ms needs 16 connections on average and more at bursts; a replica helps only the reads and adds lag, a queue changes checkout's semantics.").
			WithUsage(use(700, 120)).For(subagent.DefaultForkName),
	).Named("acme", "large-1")
	return cheap, expert
}

// answer is the lead's last turn: it answers from what its sub-agents
// said.
func answer(_ context.Context, req provider.Request) (provider.Response, error) {
	var said []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleTool {
			said = append(said, m.Content)
		}
	}
	msg := provider.AssistantMessage("From the incidents and the expert's judgement: " + strings.Join(said, " "))
	return provider.Response{Message: msg, Usage: provider.Usage{InputTokens: 1500, OutputTokens: 90, Requests: 1}, StopReason: provider.StopEndTurn, Model: "small-1"}, nil
}

// Command fanout shows a lead agent fanning out: in one turn it spawns three
// researchers with spawn_subagent, each asked for a typed answer through an
// output schema, and writes its answer from their validated findings. It
// prints the run tree (subagent.Tree) with each child's model, tokens, cost
// and wall time, which shows the children running side by side, and what
// the run cost in all, how many model calls waited for the provider's
// admission control and how many sub-agents a limit refused.
//
// Costs come from a price table given to the lead (agent.WithPrices), which
// prices its children's calls too: -prices names a file in the format of
// LiteLLM's model_prices_and_context_window.json; without it, the fake
// model gets made-up example prices (deputy ships no prices).
//
// It runs on the scripted fake provider, so it needs no key and no network;
// the researchers take 300 to 500 ms to answer. Built with -tags realmodel,
// it runs on the model the environment names (see examples/internal/pick).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Finding is what each researcher must return.
type Finding struct {
	Claim      string  `json:"claim" jsonschema:"description=The finding, in one sentence."`
	Evidence   string  `json:"evidence" jsonschema:"description=Where it comes from."`
	Confidence float64 `json:"confidence" jsonschema:"minimum=0,maximum=1,description=How sure you are, from 0 to 1."`
}

const question = "Should Lisbon extend its tram network to the eastern riverside?"

func main() {
	file := flag.String("prices", "", "a price table in LiteLLM's JSON format, for the tree's costs")
	flag.Parse()
	var prices *provider.Prices
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			log.Fatal(err)
		}
		prices, err = provider.ReadPrices(f, 0)
		f.Close()
		if err != nil {
			log.Fatal(err)
		}
	}
	if err := run(context.Background(), os.Stdout, os.Getenv, prices); err != nil {
		log.Fatal(err)
	}
}

// run runs the example, writing to w; getenv picks the provider (see
// examples/internal/pick), the scripted fake when nothing is set. Costs
// are at prices, or at made-up example prices for the fake model when nil.
func run(ctx context.Context, w io.Writer, getenv func(string) string, prices *provider.Prices) error {
	if prices == nil {
		var err error
		if prices, err = fakePrices(); err != nil {
			return err
		}
	}
	schema, err := jsonschema.For[Finding]()
	if err != nil {
		return err
	}
	model, about, err := pick.FromEnv(getenv, script(schema.Raw()))
	if err != nil {
		return err
	}
	if about == pick.FakeDescription {
		about = "provider: fake (scripted replies; the researchers answer after 300-500 ms)"
	}
	return demo(ctx, w, model, about, prices, nil)
}

// demo runs the example on model, writing to w, with costs at prices;
// also, when not nil, sees the run's events (a test's subagent.Tree).
func demo(ctx context.Context, w io.Writer, model provider.Provider, about string, prices *provider.Prices, also event.Sink) error {
	fmt.Fprintln(w, about)

	// The roster the lead picks from, by name and description.
	researchers := []struct{ name, description string }{
		{"historian", "Knows what came of past transport projects in the city."},
		{"economist", "Estimates costs and benefits."},
		{"planner", "Knows ridership, routes and land use."},
	}
	var roster []*subagent.SubAgentTool
	for _, r := range researchers {
		m, err := subagent.FromReact(r.name, r.description, model, nil,
			subagent.WithReactOptions(agent.WithSystemPrompt("You are the team's "+r.name+". "+r.description)))
		if err != nil {
			return err
		}
		roster = append(roster, m)
	}
	tools, err := tool.NewRegistry()
	if err != nil {
		return err
	}
	spawner, err := subagent.NewSpawner(model, tools, subagent.WithRoster(roster...))
	if err != nil {
		return err
	}
	if err := tools.Register(spawner); err != nil {
		return err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithRegistry(tools), agent.WithPrices(prices),
		agent.WithSystemPrompt("You lead a research team. Split the question, delegate, then answer from the findings."))
	if err != nil {
		return err
	}

	// The tree of what the lead delegated: each child's arguments, state,
	// model, usage per model and wall time.
	tree := subagent.NewTree(also)
	ctx = event.WithSink(ctx, tree)
	start := time.Now()
	out, err := lead.Run(ctx, agent.Input{Text: question})
	if err != nil {
		return err
	}
	wall := time.Since(start)

	fmt.Fprintln(w)
	printTree(w, out, wall, tree.Roots())
	fmt.Fprintln(w)
	fmt.Fprintln(w, "answer:", out.Answer)
	return nil
}

// fakePrices are made-up prices for the fake model, to show the column:
// not any vendor's.
func fakePrices() (*provider.Prices, error) {
	return provider.NewPrices(map[string]provider.Price{"fake": {Input: 2e-6, Output: 8e-6}})
}

// script is the fake model: the lead's two turns and each researcher's
// answer, routed by agent name.
func script(schema json.RawMessage) *fake.Provider {
	tasks := []struct{ agent, task string }{
		{"historian", "How did earlier tram extensions in Lisbon turn out?"},
		{"economist", "What would a 4 km riverside tram extension cost, and what would it return?"},
		{"planner", "How many daily riders would an eastern riverside tram line carry?"},
	}
	var calls []provider.ToolCall
	for _, t := range tasks {
		args, _ := json.Marshal(map[string]any{"agent": t.agent, "task": t.task, "context": "The question: " + question, "output_schema": schema})
		calls = append(calls, provider.ToolCall{Name: subagent.SpawnToolName, Arguments: args})
	}
	return fake.NewProvider(
		fake.Calls(calls...).For("lead"),
		fake.Respond(synthesize).For("lead"),
		fake.Text(`{"claim":"The 2018 extension of line 15 ran on time and doubled its ridership within two years.","evidence":"City transport reports, 2018-2020","confidence":0.8}`).
			For("historian").After(400*time.Millisecond),
		fake.Text("My estimate:\n```json\n"+`{"claim":"About 90 million euros to build, paid back in about 25 years of fares and time saved.","evidence":"Cost per km of recent European tram lines","confidence":0.6}`+"\n```").
			For("economist").After(300*time.Millisecond),
		fake.Text(`{"claim":"About 18,000 riders a day, most of them new to public transport.","evidence":"Census commuting data and the 2022 mobility survey","confidence":0.7}`).
			For("planner").After(500*time.Millisecond),
	)
}

// synthesize is the lead's last turn: it reads the researchers' findings,
// typed, and answers from them.
func synthesize(ctx context.Context, req provider.Request) (provider.Response, error) {
	var b strings.Builder
	b.WriteString("Yes, on balance:")
	sure := 0.0
	n := 0
	for _, m := range req.Messages {
		if m.Role != provider.RoleTool {
			continue
		}
		var f Finding
		if m.IsError || json.Unmarshal([]byte(m.Content), &f) != nil {
			b.WriteString(" (one researcher returned nothing usable)")
			continue
		}
		b.WriteString(" " + f.Claim)
		sure += f.Confidence
		n++
	}
	if n > 0 {
		fmt.Fprintf(&b, " (mean confidence %.2f)", sure/float64(n))
	}
	msg := provider.AssistantMessage(b.String())
	return provider.Response{Message: msg, Usage: fake.Usage(req, msg), StopReason: provider.StopEndTurn, Model: "fake"}, nil
}

// printTree renders the run tree: the lead, then each child in the order the
// lead called them, with its model, tokens and wall time.
func printTree(w io.Writer, out agent.Output, wall time.Duration, children []*subagent.Node) {
	order := map[string]int{}
	for _, msg := range out.Messages {
		for _, c := range msg.ToolCalls {
			order[c.ID] = len(order)
		}
	}
	sort.Slice(children, func(i, j int) bool { return order[children[i].ToolCallID] < order[children[j].ToolCallID] })

	fmt.Fprintln(w, "usage is requests, tokens in, tokens out; the lead's own calls, then its children's")
	cost := fmt.Sprintf("$%.6f", out.Cost)
	if len(out.Unpriced) > 0 {
		cost += " (no price for " + strings.Join(out.Unpriced, ", ") + ")"
	}
	fmt.Fprintf(w, "lead  own %v  children %v  cost %s  wall %v\n", out.Usage, out.ChildUsage, cost, wall.Round(10*time.Millisecond))
	fmt.Fprintf(w, "      model calls that waited for admission: %d; sub-agents refused by a limit: %d\n", out.Queued, out.Refused)
	var sum time.Duration
	var first, last time.Time // when the first child started, the last ended
	for i, n := range children {
		branch := "├─"
		if i == len(children)-1 {
			branch = "└─"
		}
		var a struct {
			Task string `json:"task"`
		}
		_ = json.Unmarshal(n.Arguments, &a)
		u := n.TotalUsage()
		sum += n.Wall()
		if first.IsZero() || n.Started.Before(first) {
			first = n.Started
		}
		if end := n.Started.Add(n.Wall()); end.After(last) {
			last = end
		}
		dollars, _ := n.Cost(nil) // as the events carried it, at the lead's prices
		cost := fmt.Sprintf("$%.6f", dollars)
		fmt.Fprintf(w, "%s %-9s %-9s %s  %d in, %d out  %s  wall %v  %q\n", branch, n.Name, n.State, n.Model,
			u.InputTokens, u.OutputTokens, cost, n.Wall().Round(10*time.Millisecond), a.Task)
	}
	fmt.Fprintf(w, "the children's wall times add up to %v; side by side they took %v\n",
		sum.Round(10*time.Millisecond), last.Sub(first).Round(10*time.Millisecond))
}

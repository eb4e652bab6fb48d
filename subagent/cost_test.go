package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// TestCost checks that a price table given to the lead prices the whole
// tree: the run's Output (its children's calls included, a model without
// a price named), each child's SUBAGENT_FINISHED usage and the Tree built
// from it, and the spans of the runs and their model calls.
func TestCost(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{
		"acme/lead-model":  {Input: 1e-6, Output: 4e-6},
		"acme/child-model": {Input: 2e-6, Output: 8e-6},
	})
	if err != nil {
		t.Fatal(err)
	}
	leadP := fake.NewProvider(
		fake.Call("child", `{"task":"a"}`).WithUsage(provider.Usage{InputTokens: 1000, OutputTokens: 100, Requests: 1}),
		fake.Call("stranger", `{"task":"b"}`).WithUsage(provider.Usage{InputTokens: 1000, OutputTokens: 100, Requests: 1}),
		fake.Text("done").WithUsage(provider.Usage{InputTokens: 2000, OutputTokens: 50, Requests: 1}),
	).Named("acme", "lead-model")
	childP := fake.NewProvider(fake.Text("a done").WithUsage(provider.Usage{InputTokens: 500, OutputTokens: 500, Requests: 1})).Named("acme", "child-model")
	strangerP := fake.NewProvider(fake.Text("b done").WithUsage(provider.Usage{InputTokens: 7, OutputTokens: 7, Requests: 1})).Named("acme", "mystery-model")
	child, err := subagent.FromFactory("child", "Does a.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(childP, agent.WithName("child"))
	})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := subagent.FromFactory("stranger", "Does b.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(strangerP, agent.WithName("stranger"))
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	lead, err := agent.NewReact(leadP, agent.WithName("lead"), agent.WithTools(child, stranger), agent.WithPrices(prices), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	out, err := lead.Run(event.WithSink(t.Context(), tree), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	leadCost := 4000*1e-6 + 250*4e-6
	childCost := 500*2e-6 + 500*8e-6
	if want := leadCost + childCost; math.Abs(out.Cost-want) > 1e-12 {
		t.Errorf("Output.Cost = %v, want %v: the lead's calls and the priced child's", out.Cost, want)
	}
	if !slices.Equal(out.Unpriced, []string{"acme/mystery-model"}) {
		t.Errorf("Output.Unpriced = %q, want the stranger's model", out.Unpriced)
	}
	var got []float64
	for _, n := range tree.Roots() {
		d, _ := n.Cost(nil)
		got = append(got, d)
	}
	if len(got) != 2 || math.Abs(got[0]-childCost) > 1e-12 || got[1] != 0 {
		t.Errorf("the tree's costs from the events: %v, want [%v 0]", got, childCost)
	}
	var chat, run []float64
	for _, s := range spans.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == agent.AttrCost {
				if strings.HasPrefix(s.Name(), "chat") {
					chat = append(chat, a.Value.AsFloat64())
				} else if s.Name() == "invoke_agent lead" {
					run = append(run, a.Value.AsFloat64())
				}
			}
		}
	}
	if len(chat) != 4 {
		t.Errorf("%d chat spans carry a cost, want 4: the lead's three calls and the priced child's", len(chat))
	}
	if len(run) != 1 || math.Abs(run[0]-out.Cost) > 1e-12 {
		t.Errorf("the lead's run span carries cost %v, want [%v]", run, out.Cost)
	}
}

// TestCostLimit runs 16 children that each try to spend a lot under a
// lead's cost limit: every child ends with success or partial, and the
// tree costs at most the limit plus one reply per run in flight (the 16
// children's and the lead's).
func TestCostLimit(t *testing.T) {
	const n, limit = 16, 0.05
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-5, Output: 4e-5}})
	if err != nil {
		t.Fatal(err)
	}
	var b billed
	calls := make([]provider.ToolCall, n)
	for i := range calls {
		calls[i] = provider.ToolCall{ID: fmt.Sprintf("c%d", i), Name: subagent.SpawnToolName, Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
	}
	p := fake.NewProvider(
		fake.Calls(calls...).For("lead"),
		fake.Text("All parts done.").For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			resp, err := b.worker(ctx, req)
			resp.Model = "fake"
			return resp, err
		}).For(subagent.DefaultForkName),
	).Loop().DontRecord().Named("fake", "fake")
	reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithMaxSpawns(n), subagent.WithReport()})
	out, err := lead(t, p, reg, agent.WithPrices(prices), agent.WithCostLimit(limit)).Run(t.Context(), agent.Input{Text: "Do all parts."})
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[subagent.ReportStatus]int{}
	for _, c := range toolResults(out.Messages) {
		var r subagent.Report
		if err := json.Unmarshal([]byte(c), &r); err != nil {
			t.Errorf("a child's result is not a report: %q", c)
		}
		statuses[r.Status]++
	}
	reply := float64(b.most.Load()) * 4e-5 // a reply priced, generously, all at the output price
	bound := limit + (n+1)*reply
	t.Logf("cost $%.4f under a limit of $%.2f (bound $%.4f); children %v", out.Cost, limit, bound, statuses)
	if out.Cost > bound {
		t.Errorf("the tree cost $%.4f, more than the limit $%.2f plus one reply per run ($%.4f)", out.Cost, limit, bound)
	}
	if statuses[subagent.ReportSuccess]+statuses[subagent.ReportPartial] != n || statuses[subagent.ReportPartial] == 0 {
		t.Errorf("children ended %v; want all %d success or partial, some partial", statuses, n)
	}
	if _, err := lead(t, p, reg, agent.WithCostLimit(limit)).Run(t.Context(), agent.Input{Text: "go"}); err == nil || !strings.Contains(err.Error(), "WithCostLimit without prices") {
		t.Errorf("a cost limit without prices: %v, want an error that says to give prices", err)
	}
}

// A validating sub-agent's corrective run gets what its first run left of
// the call's cost share, not the whole share again, as with tokens.
func TestCostShareCoversTheCorrection(t *testing.T) {
	prices, _ := provider.NewPrices(map[string]provider.Price{"acme/m": {Input: 0, Output: 1e-3}})
	childP := fake.NewProvider(fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{InputTokens: 1, OutputTokens: 100, Requests: 1} // $0.10 a reply
		n := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				n++
			}
		}
		if len(req.Tools) > 0 && n%9 < 8 {
			c := provider.ToolCall{ID: fmt.Sprintf("l%d", n), Name: "lookup", Arguments: json.RawMessage(`{}`)}
			return provider.Response{Message: provider.AssistantMessage("", c), Usage: u, Model: "m"}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("not a report"), Usage: u, Model: "m"}, nil
	})).Loop().DontRecord().Named("acme", "m")
	creg, _ := tool.NewRegistry(lookup())
	child, err := subagent.FromFactory("child", "Does it.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(childP, agent.WithName("child"), agent.WithRegistry(creg))
	}, subagent.WithReport())
	if err != nil {
		t.Fatal(err)
	}
	leadP := fake.NewProvider(fake.Call("child", `{"task":"a"}`), fake.Text("done")).Named("acme", "m")
	l, _ := agent.NewReact(leadP, agent.WithName("lead"), agent.WithTools(child), agent.WithPrices(prices), agent.WithCostLimit(1.0))
	out, err := l.Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Cost > 1.0+2*0.1 {
		t.Errorf("tree cost $%.2f under a $1.00 limit: more than the limit plus one reply per run", out.Cost)
	}
}

// TestCostLimitKeepsTheLeadsWrapUp delegates ten parts to factory
// children that would each write 500 tokens, under cost limits the
// children's answers nearly use up: the lead still answers, since what it
// keeps back before their shares pays for its wrap-up, the note that asks
// for it included; and the tree costs no more than its limit.
func TestCostLimitKeepsTheLeadsWrapUp(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("word ", 400)
	bounded := func(req provider.Request, s string) provider.Message {
		if req.MaxTokens > 0 && len(s) > 4*req.MaxTokens {
			s = s[:4*req.MaxTokens]
		}
		return provider.AssistantMessage(s)
	}
	answer := func(fn func(provider.Request) provider.Message) provider.Provider {
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			msg := fn(req)
			return provider.Response{Message: msg, Usage: fake.Usage(req, msg)}, nil
		})
	}
	worker := answer(func(req provider.Request) provider.Message { return bounded(req, "done: "+long) })
	leadP := answer(func(req provider.Request) provider.Message {
		if req.Messages[len(req.Messages)-1].Role == provider.RoleTool || len(req.Tools) == 0 {
			return bounded(req, "all done: "+long)
		}
		calls := make([]provider.ToolCall, 10)
		for i := range calls {
			calls[i] = provider.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "worker", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
		}
		return provider.AssistantMessage("", calls...)
	})
	st, err := subagent.FromFactory("worker", "Works.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(worker, agent.WithName("worker"))
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []float64{0.008, 0.01, 0.015} {
		lead, err := agent.NewReact(leadP, agent.WithName("lead"), agent.WithTools(st), agent.WithPrices(prices), agent.WithCostLimit(limit))
		if err != nil {
			t.Fatal(err)
		}
		out, err := lead.Run(t.Context(), agent.Input{Text: "split the work in ten"})
		if err != nil {
			t.Errorf("$%v: the lead ended with %v, want its answer", limit, err)
			continue
		}
		if !strings.HasPrefix(out.Answer, "all done") || out.Cost > limit {
			t.Errorf("$%v: the lead answered %q at $%.6f, want its summing up within the limit", limit, out.Answer, out.Cost)
		}
	}
}

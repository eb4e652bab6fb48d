package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// tallied is a provider that adds up what its model calls billed.
type tallied struct {
	p  *fake.Provider
	mu sync.Mutex
	u  provider.Usage
}

func (t *tallied) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	resp, err := t.p.Complete(ctx, req)
	if err == nil {
		t.mu.Lock()
		t.u = t.u.Add(resp.Usage)
		t.mu.Unlock()
	}
	return resp, err
}

func (t *tallied) Name() string { return t.p.Name() }

func (t *tallied) billed() provider.Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.u
}

// A tool of the application's own that runs two sub-agents in one call —
// the first answers, the second asks a person before it acts — counts
// both across the resume: what the models billed over the turn is what
// the lead's Output, the Tree of the turn and its cost say, and each
// sub-agent's tool ran once. (Before, what the call had paid for before
// the question was counted by the first sub-agent as its own, and the
// second counted its part again as it replayed it.) With models that
// name their calls afresh, not at all, and from call_0.
func TestToolRunningTwoSubAgentsCountsBoth(t *testing.T) {
	price := provider.Price{Input: 1.0 / (1 << 20), Output: 4.0 / (1 << 20)}
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": price})
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids ", ids), func(t *testing.T) {
			var fresh atomic.Int64
			var ran sync.Map // tool name → *atomic.Int64
			count := func(name string) *atomic.Int64 {
				n, _ := ran.LoadOrStore(name, new(atomic.Int64))
				return n.(*atomic.Int64)
			}
			// Each agent calls its one tool in its first step, then answers.
			twoSteps := func(toolName, args, answer string) fake.Reply {
				return fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
					msg := provider.AssistantMessage(answer)
					if len(req.Messages) == 1 {
						calls := []provider.ToolCall{{Name: toolName, Arguments: json.RawMessage(args)}}
						resumetest.NameCalls(ids, calls, &fresh)
						msg = provider.AssistantMessage("", calls...)
					}
					return provider.Response{Message: msg, Usage: fake.Usage(req, msg), Model: "fake"}, nil
				})
			}
			fp := fake.NewProvider(
				twoSteps("pair", `{}`, "Both parts are done.").For("lead"),
				twoSteps("note", `{"text":"part a"}`, "Part a is noted.").For("a"),
				twoSteps("deploy", `{"env":"prod"}`, "Part b is deployed.").For("b"),
			).Loop().Named("fake", "fake")
			p := &tallied{p: fp}
			sideEffect := func(name string) tool.Tool {
				return tool.Func{Def: tool.Definition{Name: name, Description: "Acts.", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(context.Context, tool.Call) (tool.Result, error) {
						count(name).Add(1)
						return tool.Result{Content: name + " done"}, nil
					}}
			}
			child := func(name string, tl tool.Tool) *subagent.SubAgentTool {
				st, err := subagent.FromFactory(name, "Does part "+name+".", func(context.Context, json.RawMessage) (agent.Agent, error) {
					return agent.NewReact(p, agent.WithName(name), agent.WithTools(tl))
				})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			a := child("a", sideEffect("note"))
			b := child("b", tool.RequireApproval(sideEffect("deploy"), "", 0))
			pair := tool.Func{Def: tool.Definition{Name: "pair", Description: "Does both parts.", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
					count("pair").Add(1)
					ra, err := a.Call(ctx, tool.Call{ID: c.ID, Name: "a", Arguments: json.RawMessage(`{"task":"part a"}`)})
					if err != nil {
						return tool.Result{Usage: ra.Usage}, err
					}
					rb, err := b.Call(ctx, tool.Call{ID: c.ID, Name: "b", Arguments: json.RawMessage(`{"task":"part b"}`)})
					u := ra.Usage.Add(rb.Usage)
					if err != nil {
						return tool.Result{Usage: u}, err
					}
					return tool.Result{Content: ra.Content + "\n" + rb.Content, Usage: u}, nil
				}}
			lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(pair), agent.WithPrices(prices))
			if err != nil {
				t.Fatal(err)
			}
			st := newStore(t)
			tree := subagent.NewTree(nil)
			ctx := context.Background()
			var out agent.Output
			for round := range 2 {
				j, err := st.Journal(context.Background(), "pair")
				if err != nil {
					t.Fatal(err)
				}
				out, err = lead.Run(agent.WithJournal(event.WithSink(ctx, tree), j), agent.Input{Text: "Do both parts."})
				var in *tool.Interrupted
				switch {
				case round == 0 && errors.As(err, &in):
					if len(in.Interrupts) != 1 {
						t.Fatalf("%d questions, want the one of the deploy", len(in.Interrupts))
					}
					if ctx, err = tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved,
						Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
						t.Fatal(err)
					}
				case round == 1 && err == nil:
				default:
					t.Fatalf("run %d: %v", round, err)
				}
			}
			billed := p.billed()
			if got := out.TotalUsage(); got != billed {
				t.Errorf("the models billed %+v over the turn; Output.Usage + ChildUsage say %+v", billed, got)
			}
			if want := price.Cost(billed); !near(out.Cost, want) {
				t.Errorf("the models billed $%v over the turn; Output.Cost says $%v", want, out.Cost)
			}
			var nodes provider.Usage
			for _, n := range tree.Roots() {
				nodes = nodes.Add(n.TotalUsage())
			}
			childUsage := out.ChildUsage
			childUsage.Requests = 0
			if nodes != childUsage {
				t.Errorf("the Tree's sub-agents spent %+v; Output.ChildUsage says %+v", nodes, childUsage)
			}
			if n := len(tree.Roots()); n != 2 {
				t.Errorf("the Tree holds %d sub-agents, want a and b", n)
			}
			if out.Answer != "Both parts are done." {
				t.Errorf("the lead answered %q", out.Answer)
			}
			for name, want := range map[string]int64{"note": 1, "deploy": 1, "pair": 2} {
				if got := count(name).Load(); got != want {
					t.Errorf("%s ran %d times, want %d", name, got, want)
				}
			}
		})
	}
}

// near reports whether two sums of money differ by rounding only.
func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// meter is what the models of a test billed, per model, and for which
// requests, as a provider's invoice counts them.
type meter struct {
	mu      sync.Mutex
	byModel map[string]provider.Usage
	paid    map[string]int // request fingerprint → answers billed
}

func (m *meter) bill(model string, req provider.Request, u provider.Usage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byModel == nil {
		m.byModel, m.paid = map[string]provider.Usage{}, map[string]int{}
	}
	m.byModel[model] = m.byModel[model].Add(u)
	var b strings.Builder
	b.WriteString(model + "|" + req.System)
	for _, msg := range req.Messages {
		fmt.Fprintf(&b, "|%s:%s", msg.Role, msg.Content)
		for _, c := range msg.ToolCalls {
			fmt.Fprintf(&b, "[%s %s]", c.Name, c.Arguments)
		}
	}
	m.paid[b.String()]++
}

func (m *meter) snapshot() (map[string]provider.Usage, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]provider.Usage{}
	for k, v := range m.byModel {
		out[k] = v
	}
	var twice []string
	for fp, n := range m.paid {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%d× %.200q", n, fp))
		}
	}
	return out, twice
}

// A validated resident expert whose first answer is rejected is run again
// to correct it; its provider refuses that corrective request as too long
// (it carries the first run's turn), so the expert compacts, and then asks
// a person before it deploys. The turn is resumed with the approval: the
// summary is paid for once, no model answer is paid twice, the deploy runs
// once, and the last run's Output reports the whole turn — in tokens and
// in money — as the models billed it.
func TestValidatedResidentCompactsOnceAcrossAnApproval(t *testing.T) {
	prices := mk(provider.NewPrices(map[string]provider.Price{
		"lead-m":   {Input: 1.0 / (1 << 20), Output: 4.0 / (1 << 20)},
		"expert-m": {Input: 2.0 / (1 << 20), Output: 8.0 / (1 << 20)},
	}))(t)
	for _, tc := range []struct {
		idMode  string
		restart bool
	}{{"fresh ids", false}, {"no ids", false}, {"ids from call_0", false}, {"fresh ids", true}, {"no ids", true}, {"ids from call_0", true}} {
		idMode := tc.idMode
		t.Run(fmt.Sprint(idMode, " restart ", tc.restart), func(t *testing.T) {
			var m meter
			var ids atomic.Int64
			var deploys, refusals, summaries atomic.Int64
			id := func(i int) string {
				switch idMode {
				case "fresh ids":
					return fmt.Sprint("call_", ids.Add(1))
				case "ids from call_0":
					return fmt.Sprint("call_", i)
				}
				return ""
			}
			const firstAnswer = "I am done, more or less."
			expertModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				var msg provider.Message
				switch {
				case req.System == agent.DefaultSummaryPrompt:
					summaries.Add(1)
					msg = provider.AssistantMessage("Earlier: the expert was asked to check the release and answered loosely.")
				default:
					for _, x := range req.Messages {
						if x.Role == provider.RoleAssistant && x.Content == firstAnswer {
							// The corrective request carries the first
							// run's turn whole: too long for the window.
							refusals.Add(1)
							return provider.Response{}, &provider.Error{Provider: "acme", Kind: provider.KindContextWindow, StatusCode: 400, Message: "prompt is too long"}
						}
					}
					last := req.Messages[len(req.Messages)-1]
					corrective := false
					for _, x := range req.Messages {
						if x.Role == provider.RoleUser && strings.Contains(x.Content, "Your answer was rejected") {
							corrective = true
						}
					}
					switch {
					case !corrective:
						msg = provider.AssistantMessage(firstAnswer)
					case last.Role == provider.RoleUser:
						msg = provider.AssistantMessage("", provider.ToolCall{ID: id(0), Name: "deploy", Arguments: json.RawMessage(`{"env":"prod"}`)})
					default:
						msg = provider.AssistantMessage(`{"status":"success","summary":"deployed: ` + last.Content + `","findings":null}`)
					}
				}
				u := fake.Usage(req, msg)
				m.bill("expert-m", req, u)
				return provider.Response{Message: msg, Usage: u, Model: "expert-m"}, nil
			})
			leadModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				var msg provider.Message
				if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
					msg = provider.AssistantMessage("lead done: " + last.Content)
				} else {
					msg = provider.AssistantMessage("", provider.ToolCall{ID: id(0), Name: "expert", Arguments: json.RawMessage(`{"task":"check the release"}`)})
				}
				u := fake.Usage(req, msg)
				m.bill("lead-m", req, u)
				return provider.Response{Message: msg, Usage: u, Model: "lead-m"}, nil
			})
			deploy := tool.RequireApproval(tool.Func{Def: tool.Definition{Name: "deploy", Description: "Deploys.", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
					deploys.Add(1)
					return tool.Result{Content: "deployed to prod"}, nil
				}}, "deploys", 0)
			build := func() *agent.React {
				expertAgent := mk(agent.NewReact(expertModel, agent.WithName("expert"), agent.WithTools(deploy),
					agent.WithCompaction(agent.Compaction{KeepTurns: 1})))(t)
				expert := mk(subagent.FromAgent("expert", "Checks and deploys.", expertAgent, subagent.WithReport()))(t)
				return mk(agent.NewReact(leadModel, agent.WithName("lead"), agent.WithTools(expert), agent.WithPrices(prices)))(t)
			}
			lead := build()

			st := newStore(t)
			tree := subagent.NewTree(nil)
			run := func(ctx context.Context) (agent.Output, error) {
				t.Helper()
				j, err := st.Journal(context.Background(), "turn")
				if err != nil {
					t.Fatal(err)
				}
				return lead.Run(agent.WithJournal(event.WithSink(ctx, tree), j), agent.Input{Text: "check and deploy"})
			}
			_, err := run(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("the first run: %v, want one question", err)
			}
			if refusals.Load() != 1 || summaries.Load() != 1 {
				t.Fatalf("the first run met %d refusals and paid %d summaries, want one of each", refusals.Load(), summaries.Load())
			}
			ctx, err := tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			if tc.restart {
				lead = build()
			}
			out, err := run(ctx)
			if err != nil {
				t.Fatalf("the resumed run: %v", err)
			}
			billed, twice := m.snapshot()
			for _, fp := range twice {
				t.Errorf("a model answer paid again: %s", fp)
			}
			if got := summaries.Load(); got != 1 {
				t.Errorf("the summary was paid for %d times, want once", got)
			}
			if got := refusals.Load(); got != 1 {
				t.Errorf("the provider refused %d requests as too long, want 1", got)
			}
			if got := deploys.Load(); got != 1 {
				t.Errorf("deployed %d times, want once", got)
			}
			if !strings.Contains(out.Answer, "deployed") {
				t.Errorf("the answer %q does not carry the expert's report", out.Answer)
			}
			var all provider.Usage
			var cost float64
			for model, u := range billed {
				all = all.Add(u)
				d, _ := prices.Cost(provider.ModelUsage{Model: model, Usage: u})
				cost += d
			}
			if got := out.TotalUsage(); got != all {
				t.Errorf("Output.Usage + ChildUsage %+v; the models billed %+v (lead %+v, expert %+v)", got, all, billed["lead-m"], billed["expert-m"])
			}
			if out.Usage != billed["lead-m"] {
				t.Errorf("Output.Usage %+v; the lead's model billed %+v", out.Usage, billed["lead-m"])
			}
			if out.Cost != cost {
				t.Errorf("Output.Cost $%v; the models billed $%v", out.Cost, cost)
			}
			var nodes provider.Usage
			var nodesCost float64
			for _, n := range tree.Roots() {
				nodes = nodes.Add(n.TotalUsage())
				d, _ := n.Cost(nil)
				nodesCost += d
			}
			want := billed["expert-m"]
			want.Requests = 0
			if nodes != want {
				t.Errorf("the Tree's sub-agents spent %+v; the expert's model billed %+v", nodes, billed["expert-m"])
			}
			if wantCost, _ := prices.Cost(provider.ModelUsage{Model: "expert-m", Usage: billed["expert-m"]}); nodesCost != wantCost {
				t.Errorf("the Tree's sub-agents cost $%v; the expert's model billed $%v", nodesCost, wantCost)
			}
		})
	}
}

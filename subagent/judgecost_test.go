package subagent_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// billingModel answers with fn and counts what it bills.
type billingModel struct {
	mu     sync.Mutex
	billed provider.Usage
	calls  []provider.Usage
	fn     func(provider.Request) provider.Message
}

func (b *billingModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	msg := b.fn(req)
	u := fake.Usage(req, msg)
	b.mu.Lock()
	b.billed = b.billed.Add(u)
	b.calls = append(b.calls, u)
	b.mu.Unlock()
	return provider.Response{Message: msg, Usage: u}, nil
}

// TestJudgeCostCountsOnce guards a child's answer, and the lead's, with a
// judge on a model of its own (subagent.Judge): what the judge's calls
// cost counts once in the lead's Output (usage and dollars) and in the
// tree's ledger (the child's node and the root's), equal to what the
// models billed.
func TestJudgeCostCountsOnce(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	judgeP := &billingModel{fn: func(req provider.Request) provider.Message {
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, "TODO") {
			return provider.AssistantMessage(`{"pass": false, "problem": "it leaves a TODO"}`)
		}
		return provider.AssistantMessage(`{"pass": true}`)
	}}
	judge, err := subagent.Judge(judgeP, "Fail an answer that leaves work undone.")
	if err != nil {
		t.Fatal(err)
	}
	gs := []policy.Guardrail{{Name: "judge", Stage: policy.Output, Retry: true, Check: judge}}
	writes := 0
	kidP := &billingModel{fn: func(req provider.Request) provider.Message {
		writes++
		if writes == 1 {
			return provider.AssistantMessage("draft, TODO: the ending")
		}
		return provider.AssistantMessage("the whole story")
	}}
	kid, err := subagent.FromFactory("writer", "Writes.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(kidP, agent.WithName("writer"), agent.WithGuardrails(gs...))
	})
	if err != nil {
		t.Fatal(err)
	}
	leadP := &billingModel{fn: func(req provider.Request) provider.Message {
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.AssistantMessage("lead: " + last.Content)
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "writer", Arguments: json.RawMessage(`{"task":"a story"}`)})
	}}
	lead, err := agent.NewReact(leadP, agent.WithName("lead"), agent.WithTools(kid), agent.WithPrices(prices), agent.WithGuardrails(gs...))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	out, err := lead.Run(event.WithSink(t.Context(), tree), agent.Input{Text: "a story"})
	if err != nil {
		t.Fatal(err)
	}
	all := leadP.billed.Add(kidP.billed).Add(judgeP.billed)
	cost := func(u provider.Usage) float64 {
		return float64(u.InputTokens)*price.Input + float64(u.OutputTokens)*price.Output
	}
	if judgeP.billed.Requests != 3 || writes != 2 {
		t.Fatalf("the judge was asked %d times, the writer wrote %d times: want its two answers and the lead's judged", judgeP.billed.Requests, writes)
	}
	if out.TotalUsage() != all {
		t.Errorf("Output reports %v, the models billed %v (the judge %v)", out.TotalUsage(), all, judgeP.billed)
	}
	if math.Abs(out.Cost-cost(all)) > 1e-12 {
		t.Errorf("Output.Cost = $%.9f, the models billed $%.9f (the judge $%.9f)", out.Cost, cost(all), cost(judgeP.billed))
	}
	roots := tree.Roots()
	if len(roots) != 1 {
		t.Fatalf("the tree has %d roots, want the writer's invocation", len(roots))
	}
	// The writer's node: its calls and the judge's first two, of its
	// answers (the third judges the lead's).
	kidAll := kidP.billed.Add(judgeP.calls[0]).Add(judgeP.calls[1])
	node := roots[0].TotalUsage()
	if got, _ := roots[0].Cost(nil); node.InputTokens != kidAll.InputTokens || node.OutputTokens != kidAll.OutputTokens || math.Abs(got-cost(kidAll)) > 1e-12 {
		t.Errorf("the writer's node reports %v costing $%.9f, the writer and its judge billed %v, $%.9f", node, got, kidAll, cost(kidAll))
	}
}

package subagent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
)

// A lead on a router whose default model ("auto") no price names, under
// a cost limit: its first call, before any reply has named the model that
// answers, is reserved at the dearest price in the table, so the reply it
// may write is bounded and the run keeps to its limit (before, the call
// had no cost bound: it went out with max_tokens 4096 and the router's
// model wrote all of it, $0.250 under a limit of $0.061). Once a reply
// names the model, the calls are reserved at its price, as before.
func TestARoutersFirstCallKeepsToTheCostLimit(t *testing.T) {
	prices := mk(provider.NewPrices(map[string]provider.Price{
		"acme-big":   {Input: 16.0 / (1 << 20), Output: 64.0 / (1 << 20)},
		"acme-small": {Input: 1.0 / (1 << 20), Output: 4.0 / (1 << 20)},
	}))(t)
	// The price of a thousand tokens acme-big writes.
	const limit = 1000 * 64.0 / (1 << 20)
	for _, limited := range []bool{false, true} {
		t.Run(fmt.Sprint("limited ", limited), func(t *testing.T) {
			var maxTokens []int
			p := &askedModel{prices: prices, router: "acme-big", answer: func(req provider.Request) provider.Message {
				maxTokens = append(maxTokens, req.MaxTokens)
				return provider.AssistantMessage("The report: " + strings.Repeat("a long finding ", 2000))
			}}
			opts := []agent.Option{agent.WithName("lead"), agent.WithPrices(prices)}
			if limited {
				opts = append(opts, agent.WithCostLimit(limit))
			}
			out, err := mk(agent.NewReact(p, opts...))(t).Run(context.Background(), agent.Input{Text: "Write the report."})
			if err != nil {
				t.Fatal(err)
			}
			billed := p.billed()
			t.Logf("billed $%.5f under $%.5f, max_tokens %v", billed, limit, maxTokens)
			if out.Cost != billed {
				t.Errorf("Output.Cost $%v; the provider billed $%v", out.Cost, billed)
			}
			if !limited {
				if billed < 2*limit {
					t.Fatalf("unlimited, the report cost $%.5f: the test needs one that costs far more than $%.5f", billed, limit)
				}
				return
			}
			if billed > limit {
				t.Errorf("the report cost $%.5f under a limit of $%.5f", billed, limit)
			}
			if len(maxTokens) == 0 || maxTokens[0] == 0 || maxTokens[0] >= 1000 {
				t.Errorf("the first call's max_tokens %v: want it bounded by what the limit pays for at the dearest price", maxTokens)
			}
		})
	}
}

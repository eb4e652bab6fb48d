package temporal

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/provider"
)

// defaulted is a provider whose replies name no model: the model that
// answers a request naming none is its default.
type defaulted struct {
	provider.Func
	model string
}

func (d defaulted) Model() string { return d.model }

// A resident whose conversation is compacted reports what its summaries
// cost with the call that made them, in tokens and in money, priced at
// the provider's default model (which answered them, no model named),
// not at the dearest of the prices: over twelve calls the answers'
// usage, cost and models add up to what the provider billed.
func TestResidentSummaryCostCountsOnTemporal(t *testing.T) {
	cheap, dear := provider.Price{Input: 1e-6, Output: 2e-6}, provider.Price{Input: 1e-4, Output: 2e-4}
	prices, err := provider.NewPrices(map[string]provider.Price{"cheap": cheap, "dear": dear})
	if err != nil {
		t.Fatal(err)
	}
	var b billing
	var summaries atomic.Int64
	p := defaulted{model: "cheap", Func: func(ctx context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{InputTokens: 100, OutputTokens: 10, Requests: 1}
		if strings.Contains(req.System, "ummar") {
			u = provider.Usage{InputTokens: 300, OutputTokens: 40, Requests: 1}
			summaries.Add(1)
		}
		b.add("cheap", u)
		return provider.Response{Message: provider.AssistantMessage("a: " + lastUser(req)), Usage: u, StopReason: provider.StopEndTurn}, nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Prices: prices})
	outs := map[string]RunOutput{}
	for i := range 12 {
		id := fmt.Sprint(i)
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(AskUpdate, id, &testsuite.TestUpdateCallback{
				OnReject: func(err error) { t.Errorf("ask %s rejected: %v", id, err) },
				OnAccept: func() {},
				OnComplete: func(v any, err error) {
					if err != nil {
						t.Errorf("ask %s: %v", id, err)
						return
					}
					outs[id] = v.(RunOutput)
				},
			}, "q"+id)
		}, time.Duration(i+1)*time.Second)
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(CloseSignal, nil) }, 13*time.Second)
	env.ExecuteWorkflow(ResidentWorkflowName, ResidentInput{Spec: Spec{Provider: "m", MaxAttempts: 1},
		Compaction: Compaction{MaxMessages: 6, KeepTurns: 1}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if summaries.Load() < 3 {
		t.Fatalf("%d summaries over 12 calls with a bound of 6 messages: the test tries nothing", summaries.Load())
	}
	var u provider.Usage
	var cost, models float64
	for _, o := range outs {
		u = u.Add(o.TotalUsage())
		cost += o.Cost
		for _, m := range o.Models {
			if m.Model != "cheap" {
				t.Errorf("an answer counts %v under model %q, want the provider's default, cheap", m.Usage, m.Model)
			}
			models += m.Cost
		}
	}
	billed := b.snapshot()["cheap"]
	want := costOfUsage(cheap, billed)
	if u != billed || math.Abs(cost-want) > 1e-12 || math.Abs(models-want) > 1e-12 {
		t.Errorf("the answers report %v costing $%.6f ($%.6f by model); the provider billed %v ($%.6f at its default model's price), %d summaries among them",
			u, cost, models, billed, want, summaries.Load())
	}
}

// A resident under a token or a cost limit reserves its summary under
// them, as in process, and its run has what the summary cost taken off
// them: no call spends more than its limit with its summary (here a
// model that would write 2,500 tokens of summary, $0.075, under a $0.02
// limit), and each call reports what it spent, its summary included,
// in its answer or in its error's details: together, what the provider
// billed.
func TestResidentSummaryKeepsToTheLimitsOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	for _, lim := range []struct {
		name   string
		tokens int64
		cost   float64
	}{{"tokens", 1500, 0}, {"cost", 0, 0.02}} {
		t.Run(lim.name, func(t *testing.T) {
			var b billing
			var summaries atomic.Int64
			p := defaulted{model: "m1", Func: func(ctx context.Context, req provider.Request) (provider.Response, error) {
				in := int64(len(req.System)+3) / 4
				for _, m := range req.Messages {
					in += int64(len(m.Content)+3) / 4
				}
				text := "a: " + lastUser(req) + " " + strings.Repeat("word ", 100)
				if strings.Contains(req.System, "ummar") {
					summaries.Add(1)
					text = "summary " + strings.Repeat("gist ", 2000)
				}
				if req.MaxTokens > 0 && len(text) > 4*req.MaxTokens {
					text = text[:4*req.MaxTokens]
				}
				u := provider.Usage{InputTokens: in, OutputTokens: int64(len(text)+3) / 4, Requests: 1}
				b.add("m1", u)
				return provider.Response{Message: provider.AssistantMessage(text), Usage: u, StopReason: provider.StopEndTurn}, nil
			}}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Prices: prices})
			var reported, before provider.Usage // what the calls reported, and what was billed before the call
			var cost float64
			answered := 0
			for i := range 8 {
				id := fmt.Sprint(i)
				env.RegisterDelayedCallback(func() {
					env.UpdateWorkflow(AskUpdate, id, &testsuite.TestUpdateCallback{
						OnReject: func(err error) { t.Errorf("ask %s rejected: %v", id, err) },
						OnAccept: func() {},
						OnComplete: func(v any, err error) {
							u, c := usageOf(err), costOf(err)
							if err == nil {
								answered++
								u, c = v.(RunOutput).TotalUsage(), v.(RunOutput).Cost
							}
							t.Logf("ask %s: %v, $%.6f, %v", id, u, c, err)
							reported, cost = reported.Add(u), cost+c
							// The calls are asked one at a time.
							now := b.snapshot()["m1"]
							billed := usage.Less(now, before)
							before = now
							if lim.tokens > 0 && billed.Tokens() > lim.tokens+10 || lim.cost > 0 && costOfUsage(price, billed) > lim.cost+10*price.Input {
								t.Errorf("ask %s: the provider billed %v, $%.6f, past the limit", id, billed, costOfUsage(price, billed))
							}
							if u != billed || math.Abs(c-costOfUsage(price, billed)) > 1e-12 {
								t.Errorf("ask %s reports %v, $%.6f; the provider billed %v, $%.6f", id, u, c, billed, costOfUsage(price, billed))
							}
						},
					}, "q"+id)
				}, time.Duration(i+1)*time.Second)
			}
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(CloseSignal, nil) }, 10*time.Second)
			env.ExecuteWorkflow(ResidentWorkflowName, ResidentInput{Spec: Spec{Provider: "m", MaxAttempts: 1, TokenLimit: lim.tokens, CostLimit: lim.cost},
				Compaction: Compaction{MaxMessages: 6, KeepTurns: 1}})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if summaries.Load() == 0 || answered < 4 {
				t.Fatalf("%d summaries, %d answers: the test tries nothing", summaries.Load(), answered)
			}
			billed := b.snapshot()["m1"]
			if reported != billed || math.Abs(cost-costOfUsage(price, billed)) > 1e-12 {
				t.Errorf("the calls report %v, $%.6f; the provider billed %v, $%.6f", reported, cost, billed, costOfUsage(price, billed))
			}
		})
	}
}

package agent_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
)

// defaultModelProvider answers as its default model, which it names with
// Model, and does not name the model in its replies.
type defaultModelProvider struct {
	provider.Func
}

func (defaultModelProvider) Name() string  { return "acme" }
func (defaultModelProvider) Model() string { return "acme-1" }

// A compaction's summary, made by the agent's own provider, is priced as
// the agent's other calls to that provider are: at the provider's default
// model when neither the agent nor the reply names one, not at the
// dearest price of the table (sixteen times acme-1's here), so what the runs'
// Outputs cost is what the provider billed.
func TestSummaryIsPricedAtTheProvidersDefaultModel(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{
		"acme-1":   {Input: 1.0 / (1 << 20), Output: 4.0 / (1 << 20)},
		"acme-max": {Input: 16.0 / (1 << 20), Output: 64.0 / (1 << 20)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var billed provider.Usage
	var summaries int
	p := defaultModelProvider{provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		msg := provider.AssistantMessage("ok")
		if req.System == agent.DefaultSummaryPrompt {
			summaries++
			msg = provider.AssistantMessage("Earlier: notes.")
		} else {
			for _, m := range req.Messages {
				if m.Content == "note 0" && len(req.Messages) > 4 {
					return provider.Response{}, &provider.Error{Provider: "acme", Kind: provider.KindContextWindow, StatusCode: 400, Message: "prompt is too long"}
				}
			}
		}
		u := fake.Usage(req, msg)
		billed = billed.Add(u)
		return provider.Response{Message: msg, Usage: u}, nil
	})}
	a := newReact(t, p, agent.WithPrices(prices), agent.WithCompaction(agent.Compaction{KeepTurns: 1}))
	var cost float64
	var used provider.Usage
	compactions := 0
	for i := range 4 {
		out, err := a.Run(context.Background(), agent.Input{Text: "note " + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Unpriced) > 0 {
			t.Errorf("run %d: Output.Unpriced %v, want none: every call went to acme-1, which is priced", i, out.Unpriced)
		}
		cost += out.Cost
		used = used.Add(out.TotalUsage())
		compactions += out.Compactions
	}
	if summaries != 1 || compactions != 1 {
		t.Fatalf("%d summaries, %d compactions: want one of each", summaries, compactions)
	}
	want, _ := prices.Cost(provider.ModelUsage{Provider: "acme", Model: "acme-1", Usage: billed})
	if used != billed || cost != want {
		t.Errorf("the runs' Output say %+v, $%v; the provider billed %+v, $%v", used, cost, billed, want)
	}
}

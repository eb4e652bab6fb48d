package subagent_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// askedModel is a provider whose default model is acme-small and which
// answers as the model a request names: a reply names it, and is billed
// at its price. It writes as much as a request's output bound lets it.
type askedModel struct {
	prices *provider.Prices
	answer func(req provider.Request) provider.Message
	// router, when set, makes the provider a router's: its default model
	// is "auto", which no price names, and every reply is the router
	// model's, named and billed as such, whatever the request names.
	router string

	mu   sync.Mutex
	cost float64
}

func (*askedModel) Name() string { return "acme" }

func (m *askedModel) Model() string {
	if m.router != "" {
		return "auto"
	}
	return "acme-small"
}

func (m *askedModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	model := cmp.Or(m.router, req.Model, m.Model())
	msg := m.answer(req)
	stop := provider.StopEndTurn
	if len(msg.ToolCalls) > 0 {
		stop = provider.StopToolUse
	}
	if req.MaxTokens > 0 && len(msg.ToolCalls) == 0 && len(msg.Content) > 4*req.MaxTokens {
		// It stops where the bound says, as a real model does.
		msg.Content, stop = msg.Content[:4*req.MaxTokens], provider.StopMaxTokens
	}
	u := fake.Usage(req, msg)
	if req.MaxTokens > 0 && u.OutputTokens > int64(req.MaxTokens) {
		u.OutputTokens, stop = int64(req.MaxTokens), provider.StopMaxTokens
	}
	d, _ := m.prices.Cost(provider.ModelUsage{Provider: "acme", Model: model, Usage: u})
	m.mu.Lock()
	m.cost += d
	m.mu.Unlock()
	return provider.Response{Message: msg, Usage: u, Model: model, StopReason: stop}, nil
}

func (m *askedModel) billed() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cost
}

// A lead on a dearer model than its provider's default forks eight
// children at once under a cost limit. A context fork asks its parent's
// model (whose cache holds the prefix), so its first call is reserved at
// that model's price, not at the default model's the fork's own agent
// would ask: the tree spends no more than its limit, where reserving at
// the default's price, sixteen times lower, let each fork write thousands
// of tokens at the dearer price and the tree spend eight times its limit.
func TestForksOfADearerModelKeepToTheCostLimit(t *testing.T) {
	forksUnderACostLimit(t, "", true, agent.WithModel("acme-big"))
}

// A lead on a router whose default model ("auto") no price names, and
// whose replies all come from acme-big, forks eight children at once under
// a cost limit, context forks and fresh ones. A fork's calls ask what its
// parent's ask, so they are reserved at the price of the model that
// answered the parent, acme-big: the tree spends no more than its limit
// and the lead answers, where reserving at "auto", which costs nothing
// against the limit, sent each fork's first call with no output bound, and
// the forks wrote thousands of tokens at acme-big's price.
func TestForksOfARouterKeepToTheCostLimit(t *testing.T) {
	for _, context := range []bool{true, false} {
		t.Run(fmt.Sprint("context forks ", context), func(t *testing.T) {
			forksUnderACostLimit(t, "acme-big", context)
		})
	}
}

// forksUnderACostLimit runs a lead that looks sites up and forks eight
// children (context forks, or fresh ones) that write long findings, on
// askedModel with router, and checks that under a cost limit the tree
// spends no more than it and the lead answers, and that without one it
// spends more.
func forksUnderACostLimit(t *testing.T, router string, contextForks bool, lead ...agent.Option) {
	prices := mk(provider.NewPrices(map[string]provider.Price{
		"acme-big":   {Input: 16.0 / (1 << 20), Output: 64.0 / (1 << 20)},
		"acme-small": {Input: 1.0 / (1 << 20), Output: 4.0 / (1 << 20)},
	}))(t)
	// The input price of sixteen thousand tokens of acme-big.
	const limit = 16000 * 16.0 / (1 << 20)
	for _, limited := range []bool{false, true} {
		t.Run(fmt.Sprint("limited ", limited), func(t *testing.T) {
			p := &askedModel{prices: prices, router: router, answer: func(req provider.Request) provider.Message {
				// A context fork's request shares its parent's prefix; a
				// fresh fork's starts with its task.
				fork := req.SharedPrefix > 0 || strings.HasPrefix(req.Messages[0].Content, "audit part")
				switch {
				case fork:
					return provider.AssistantMessage("findings: " + strings.Repeat("a finding ", 2000))
				case len(req.Messages) == 1:
					return provider.AssistantMessage("", provider.ToolCall{ID: "look", Name: "lookup", Arguments: json.RawMessage(`{}`)})
				case len(req.Messages) == 3:
					var calls []provider.ToolCall
					for i := range 8 {
						calls = append(calls, provider.ToolCall{ID: fmt.Sprint("fork_", i), Name: subagent.SpawnToolName, Arguments: json.RawMessage(fmt.Sprintf(`{"task":"audit part %d"}`, i))})
					}
					return provider.AssistantMessage("", calls...)
				}
				return provider.AssistantMessage("The audit is done.")
			}}
			lookup := tool.Func{Def: tool.Definition{Name: "lookup", Description: "Looks the sites up.", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(context.Context, tool.Call) (tool.Result, error) {
					return tool.Result{Content: strings.Repeat("site data ", 400)}, nil
				}}
			reg := mk(tool.NewRegistry(lookup))(t)
			var forks []subagent.SpawnOption
			if contextForks {
				forks = append(forks, subagent.WithContextForks())
			}
			sp := mk(subagent.NewSpawner(p, reg, forks...))(t)
			if err := reg.Register(sp); err != nil {
				t.Fatal(err)
			}
			opts := append([]agent.Option{agent.WithName("lead"), agent.WithRegistry(reg), agent.WithPrices(prices)}, lead...)
			if limited {
				opts = append(opts, agent.WithCostLimit(limit))
			}
			out, err := mk(agent.NewReact(p, opts...))(t).Run(context.Background(), agent.Input{Text: "Audit the sites."})
			billed := p.billed()
			t.Logf("billed $%.4f, Output.Cost $%.4f, answer %q", billed, out.Cost, out.Answer)
			if limited && billed > limit {
				t.Errorf("the tree cost $%.4f under a limit of $%.4f", billed, limit)
			}
			if err != nil {
				t.Fatalf("the lead did not answer: %v", err)
			}
			if out.Cost != billed {
				t.Errorf("Output.Cost $%v; the provider billed $%v", out.Cost, billed)
			}
			if !limited {
				if billed < 1.5*limit {
					t.Fatalf("unlimited, the tree cost $%.4f: the test needs forks that cost far more than $%.4f", billed, limit)
				}
				return
			}
			if out.Answer != "The audit is done." {
				t.Errorf("the lead answered %q, want its own answer", out.Answer)
			}
		})
	}
}

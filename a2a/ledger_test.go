package a2a_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// billed is what the models of a test billed, per model, as a provider's
// invoice counts it.
type billed struct {
	mu      sync.Mutex
	byModel map[string]provider.Usage
}

func (b *billed) add(model string, u provider.Usage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byModel == nil {
		b.byModel = map[string]provider.Usage{}
	}
	b.byModel[model] = b.byModel[model].Add(u)
}

// total is what was billed so far, and what it cost at prices.
func (b *billed) total(t *testing.T, prices *provider.Prices) (provider.Usage, float64) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var u provider.Usage
	var dollars float64
	for m, mu := range b.byModel {
		u = u.Add(mu)
		d, unpriced := prices.Cost(provider.ModelUsage{Model: m, Usage: mu})
		if len(unpriced) > 0 {
			t.Fatalf("no price for %v", unpriced)
		}
		dollars += d
	}
	return u, dollars
}

// billingModel answers as a model: with no tool result yet it asks for
// tools (named by id), then answers with their results. Each call bills
// in and out tokens to model.
func billingModel(b *billed, id func(int64) string, n *atomic.Int64, model string, in, out int64, tools ...string) provider.Provider {
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
		b.add(model, u)
		var results []string
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				results = append(results, m.Content)
			}
		}
		if len(results) > 0 || len(tools) == 0 {
			return provider.Response{Message: provider.AssistantMessage(model + " done: " + strings.Join(results, "; ")), Usage: u, Model: model}, nil
		}
		var calls []provider.ToolCall
		for _, name := range tools {
			calls = append(calls, provider.ToolCall{ID: id(n.Add(1)), Name: name, Arguments: json.RawMessage(`{"task":"` + name + `"}`)})
		}
		return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u, Model: model}, nil
	})
}

// taskUsage is a task's UsageKey metadata as a client reads it.
type taskUsage struct {
	Requests, InputTokens, OutputTokens int64
	Cost                                float64 `json:"costUsd"`
	Earlier                             *struct {
		Requests, InputTokens, OutputTokens int64
		Cost                                float64 `json:"costUsd"`
	}
}

// A task that asked once and was continued reports in its usage what the
// models billed, its sub-agent's included, in tokens and in dollars at
// the prices the agent was given, with the part billed before the
// question under "earlier"; whatever ids the model gives its calls.
func TestTaskUsageIsWhatTheModelsBilled(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{
		"lead-m":  {Input: 3e-6, Output: 15e-6},
		"child-m": {Input: 1e-6, Output: 4e-6},
	})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			var bill billed
			var n, transfers atomic.Int64
			transfer := tool.RequireApproval(tool.Must(tool.New("transfer", "Moves money.", func(ctx context.Context, in struct {
				Task string `json:"task"`
			}) (string, error) {
				transfers.Add(1)
				return "moved", nil
			})), "moves money", 0)
			build := func(context.Context, a2a.Task) (agent.Agent, error) {
				helper, err := subagent.FromFactory("helper", "Helps.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
					return agent.NewReact(billingModel(&bill, mode.id, &n, "child-m", 40, 4), agent.WithName("helper"))
				})
				if err != nil {
					return nil, err
				}
				return agent.NewReact(billingModel(&bill, mode.id, &n, "lead-m", 100, 10, "helper", "transfer"),
					agent.WithName("payer"), agent.WithTools(helper, transfer), agent.WithPrices(prices))
			}
			s, err := a2a.NewPerTask(build, a2a.WithName("payer"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c, _ := serve(t, s, sdk.TransportProtocolJSONRPC)

			st := lastStatus(t, stream(t, c, userText("pay")))
			if st.Status.State != sdk.TaskStateInputRequired {
				t.Fatalf("first message ended %s (%q), want input-required", st.Status.State, textOf(st.Status.Message))
			}
			before, beforeCost := bill.total(t, prices)
			answer := userText("yes")
			answer.TaskID, answer.ContextID = st.TaskID, st.ContextID
			if done := lastStatus(t, stream(t, c, answer)); done.Status.State != sdk.TaskStateCompleted {
				t.Fatalf("the answer ended %s (%q), want completed", done.Status.State, textOf(done.Status.Message))
			}
			all, allCost := bill.total(t, prices)
			if transfers.Load() != 1 || all.Requests != 3 {
				t.Fatalf("%d transfers and %d model calls, want 1 and 3 (the lead twice, its helper once)", transfers.Load(), all.Requests)
			}

			task, err := c.GetTask(context.Background(), &sdk.GetTaskRequest{ID: st.TaskID})
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(task.Metadata[a2a.UsageKey])
			var u taskUsage
			if err := json.Unmarshal(raw, &u); err != nil {
				t.Fatal(err)
			}
			if u.Requests != all.Requests || u.InputTokens != all.InputTokens || u.OutputTokens != all.OutputTokens || !near(u.Cost, allCost) {
				t.Errorf("the task's usage %s; billed %+v, $%g", raw, all, allCost)
			}
			if e := u.Earlier; e == nil || e.Requests != before.Requests || e.InputTokens != before.InputTokens || e.OutputTokens != before.OutputTokens || !near(e.Cost, beforeCost) {
				t.Errorf("the task's earlier usage in %s; billed before the question %+v, $%g", raw, before, beforeCost)
			}
		})
	}
}

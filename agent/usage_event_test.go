package agent_test

import (
	"context"
	"encoding/json"
	"math"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
)

// TestUsageEventAfterEachModelCall checks that each model call's usage and
// cost reach the sink as the call ends, before the tools it asked for run,
// and that the events add up to what the run spent.
func TestUsageEventAfterEachModelCall(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"m": {Input: 1e-3, Output: 2e-3}})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if n.Add(1) == 1 {
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "weather", Arguments: json.RawMessage(`{"city":"Lisbon"}`)}),
				Usage: provider.Usage{InputTokens: 100, OutputTokens: 10, Requests: 1}, Model: "m"}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("Sunny."), Usage: provider.Usage{InputTokens: 200, OutputTokens: 20, Requests: 1}, Model: "m"}, nil
	})
	rec := &recorder{}
	a := newReact(t, p, agent.WithTools(weather(t)), agent.WithPrices(prices))
	out, err := a.Run(event.WithSink(t.Context(), rec), agent.Input{Text: "Weather?"})
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Model        string  `json:"model"`
		InputTokens  int64   `json:"inputTokens"`
		OutputTokens int64   `json:"outputTokens"`
		CostUSD      float64 `json:"costUsd"`
	}
	var got []entry
	resultAt, firstUsageAt := -1, -1
	for i, e := range rec.all() {
		switch {
		case e.Type == event.ToolCallResult && resultAt < 0:
			resultAt = i
		case e.Type == event.Custom && e.Name == agent.UsageEvent:
			if firstUsageAt < 0 {
				firstUsageAt = i
			}
			var v struct{ Usage []entry }
			if err := json.Unmarshal(e.Value, &v); err != nil || len(v.Usage) != 1 {
				t.Fatalf("%s value %s: want {\"usage\":[one entry]} (%v)", agent.UsageEvent, e.Value, err)
			}
			got = append(got, v.Usage[0])
		}
	}
	want := []entry{{"m", 100, 10, 0.12}, {"m", 200, 20, 0.24}}
	if len(got) != len(want) {
		t.Fatalf("%d usage events %+v, want one per model call: %+v", len(got), got, want)
	}
	var in, outTok int64
	var cost float64
	for i := range want {
		if got[i].Model != want[i].Model || got[i].InputTokens != want[i].InputTokens || got[i].OutputTokens != want[i].OutputTokens || math.Abs(got[i].CostUSD-want[i].CostUSD) > 1e-9 {
			t.Errorf("usage event %d is %+v, want %+v", i, got[i], want[i])
		}
		in, outTok, cost = in+got[i].InputTokens, outTok+got[i].OutputTokens, cost+got[i].CostUSD
	}
	if firstUsageAt < 0 || resultAt < 0 || firstUsageAt > resultAt {
		t.Errorf("the first call's usage came at event %d, its tool's result at %d: want the usage as the call ends, before its tools run", firstUsageAt, resultAt)
	}
	if in != out.Usage.InputTokens || outTok != out.Usage.OutputTokens || math.Abs(cost-out.Cost) > 1e-9 {
		t.Errorf("the usage events add up to %d in, %d out, $%v; the run spent %+v, $%v", in, outTok, cost, out.Usage, out.Cost)
	}
}

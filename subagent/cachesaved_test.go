package subagent_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// TestCacheSavedInMoney checks that every node says, beside what it paid,
// what the prompt cache saved it at its own model's prices: cached input
// at the cache-read price, cache writes at the write price (dearer than
// input where the vendor charges for them, so a call that only wrote
// saves less than nothing) — in the Output, the Tree built from the
// events, and the spans of the runs and of each model call.
func TestCacheSavedInMoney(t *testing.T) {
	// A vendor that charges for writes (as Anthropic does) for the lead,
	// one that does not (as OpenAI) for the child.
	leadPrice := provider.Price{Input: 3e-6, Output: 15e-6, CacheRead: 0.3e-6, CacheWrite: 3.75e-6}
	childPrice := provider.Price{Input: 2e-6, Output: 8e-6, CacheRead: 0.5e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"acme/lead-model": leadPrice, "acme/child-model": childPrice})
	if err != nil {
		t.Fatal(err)
	}
	first := provider.Usage{InputTokens: 10_000, CacheWriteTokens: 10_000, OutputTokens: 100, Requests: 1}
	second := provider.Usage{InputTokens: 12_000, CacheReadTokens: 10_000, CacheWriteTokens: 2_000, OutputTokens: 50, Requests: 1}
	childUse := provider.Usage{InputTokens: 5_000, CacheReadTokens: 4_096, OutputTokens: 100, Requests: 1}
	leadP := fake.NewProvider(
		fake.Call("child", `{"task":"a"}`).WithUsage(first),
		fake.Text("done").WithUsage(second),
	).Named("acme", "lead-model")
	childP := fake.NewProvider(fake.Text("a done").WithUsage(childUse)).Named("acme", "child-model")
	child, err := subagent.FromFactory("child", "Does a.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(childP, agent.WithName("child"))
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	lead, err := agent.NewReact(leadP, agent.WithName("lead"), agent.WithTools(child), agent.WithPrices(prices), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	out, err := lead.Run(event.WithSink(t.Context(), tree), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}

	// By hand, from the prices: what each call would have cost uncached,
	// less what it cost.
	firstSaved := -10_000 * (3.75e-6 - 3e-6)                   // wrote, read nothing
	secondSaved := 10_000*(3e-6-0.3e-6) - 2_000*(3.75e-6-3e-6) // read the first's prefix
	childSaved := 4_096 * (2e-6 - 0.5e-6)                      // reads are cheaper, writes free
	childCost := 904*2e-6 + 4_096*0.5e-6 + 100*8e-6            // what it paid
	leadCost := 10_000*3.75e-6 + 100*15e-6 + 10_000*0.3e-6 + 2_000*3.75e-6 + 50*15e-6
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	if want := firstSaved + secondSaved + childSaved; !near(out.CacheSaved, want) {
		t.Errorf("Output.CacheSaved = %v, want %v", out.CacheSaved, want)
	}
	if want := leadCost + childCost; !near(out.Cost, want) {
		t.Errorf("Output.Cost = %v, want %v", out.Cost, want)
	}
	for _, tt := range []struct {
		name string
		u    provider.Usage
		p    provider.Price
		want float64
	}{
		{"write only", first, leadPrice, firstSaved},
		{"read and write", second, leadPrice, secondSaved},
		{"read, writes free", childUse, childPrice, childSaved},
		{"no cache", provider.Usage{InputTokens: 9, OutputTokens: 9}, leadPrice, 0},
		{"no cache prices", childUse, provider.Price{Input: 1, Output: 1}, 0},
	} {
		if got := tt.p.Saved(tt.u); !near(got, tt.want) {
			t.Errorf("%s: Price.Saved = %v, want %v", tt.name, got, tt.want)
		}
	}

	roots := tree.Roots()
	if len(roots) != 1 {
		t.Fatalf("%d roots, want the child", len(roots))
	}
	n := roots[0]
	if got := n.CacheSaved(nil); !near(got, childSaved) {
		t.Errorf("the child's node says the cache saved %v (from its events), want %v", got, childSaved)
	}
	if got := n.CacheSaved(prices); !near(got, childSaved) {
		t.Errorf("the child's node says the cache saved %v at the table's prices, want %v", got, childSaved)
	}
	if got, _ := n.Cost(nil); !near(got, childCost) {
		t.Errorf("the child's node cost %v, want %v", got, childCost)
	}
	if len(n.Usage) != 1 || n.Usage[0].Usage.CacheReadTokens != 4_096 {
		t.Errorf("the child's node usage %+v, want its cached tokens", n.Usage)
	}

	var chat []float64
	var run map[string]float64 = map[string]float64{}
	for _, s := range spans.Ended() {
		for _, a := range s.Attributes() {
			if a.Key != agent.AttrCacheSaved {
				continue
			}
			if strings.HasPrefix(s.Name(), "chat") {
				chat = append(chat, a.Value.AsFloat64())
			} else {
				run[s.Name()] = a.Value.AsFloat64()
			}
		}
	}
	if len(chat) != 3 || !near(chat[0]+chat[1]+chat[2], out.CacheSaved) {
		t.Errorf("chat spans carry savings %v, want three that sum to %v", chat, out.CacheSaved)
	}
	if !near(run["invoke_agent lead"], out.CacheSaved) || !near(run["invoke_agent child"], childSaved) {
		t.Errorf("run spans carry savings %v, want the lead's %v and the child's %v", run, out.CacheSaved, childSaved)
	}
}

package subagent_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
)

// BenchmarkDelegationEvents measures what events cost on one delegation: a
// parent ReAct run calls a FromFactory ReAct child, which answers with a
// structured result, and the parent answers. "off" has no sink; "discard"
// has a sink that drops every event, so the difference is the price of
// building and emitting them (the budget is 25% over "off").
func BenchmarkDelegationEvents(b *testing.B) {
	p := fake.NewProvider(
		fake.Call("researcher", `{"task":"find X"}`).For("lead"),
		fake.Text(`{"status":"success","summary":"ok"}`).For("researcher"),
		fake.Text("X is ok.").For("lead"),
	).Loop().DontRecord()
	child, err := subagent.FromFactory("researcher", "Researches one topic.", nil,
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("researcher"))
		})
	if err != nil {
		b.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(child), agent.WithHistoryLimit(1))
	if err != nil {
		b.Fatal(err)
	}
	in := agent.Input{Text: "find X"}
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{
		{"off", context.Background()},
		{"discard", event.WithSink(context.Background(), event.SinkFunc(func(event.Event) {}))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				out, err := lead.Run(bc.ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				if out.Answer != "X is ok." {
					b.Fatalf("answer %q", out.Answer)
				}
			}
		})
	}
}

package subagent_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// completeOnly hides a provider's Stream, so that the loop calls Complete
// even when events are on.
type completeOnly struct{ p provider.Provider }

func (c completeOnly) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return c.p.Complete(ctx, req)
}

// BenchmarkDelegationEvents measures what events cost on one delegation: a
// parent ReAct run calls a FromFactory ReAct child, which answers with a
// structured result, and the parent answers. "off" has no sink; "discard"
// has a sink that drops every event, so the difference is the price of
// building and emitting them (the budget is 25% over "off"). With a sink
// the loop streams the replies of a provider that can stream, as the fake
// does; "discard-nostream" runs the same model through Complete, to tell
// the cost of the events from the cost of the fake's streaming.
func BenchmarkDelegationEvents(b *testing.B) {
	discard := event.SinkFunc(func(event.Event) {})
	for _, bc := range []struct {
		name   string
		sink   event.Sink
		stream bool
	}{
		{"off", nil, true},
		{"discard", discard, true},
		{"discard-nostream", discard, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fp := fake.NewProvider(
				fake.Call("researcher", `{"task":"find X"}`).For("lead"),
				fake.Text(`{"status":"success","summary":"ok"}`).For("researcher"),
				fake.Text("X is ok.").For("lead"),
			).Loop().DontRecord()
			var p provider.Provider = fp
			if !bc.stream {
				p = completeOnly{fp}
			}
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
			ctx := context.Background()
			if bc.sink != nil {
				ctx = event.WithSink(ctx, bc.sink)
			}
			in := agent.Input{Text: "find X"}
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				out, err := lead.Run(ctx, in)
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

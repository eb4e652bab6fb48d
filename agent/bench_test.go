package agent_test

import (
	"context"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

type benchArgs struct {
	City string `json:"city"`
}

// BenchmarkReactStep measures one ReAct run with exactly one tool call: the
// model asks for a typed tool, the tool runs (its arguments validated and
// decoded), the model reads the result and answers. Events are off.
func BenchmarkReactStep(b *testing.B) { benchReactStep(b) }

// BenchmarkReactStepLimited is BenchmarkReactStep under a token limit and
// a cost limit: its two model calls are reserved before they go, and its
// tool call gets a share. The difference from BenchmarkReactStep, over
// two, is what the reservation costs a model call.
func BenchmarkReactStepLimited(b *testing.B) {
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 4e-6}})
	if err != nil {
		b.Fatal(err)
	}
	benchReactStep(b, agent.WithTokenLimit(1_000_000), agent.WithPrices(prices), agent.WithCostLimit(100))
}

func benchReactStep(b *testing.B, opts ...agent.Option) {
	weather := tool.Must(tool.New("weather", "Reports the weather in a city.",
		func(ctx context.Context, in benchArgs) (string, error) { return "sunny in " + in.City, nil }))
	p := fake.NewProvider(
		fake.Call("weather", `{"city":"Lisbon"}`),
		fake.Text("It is sunny in Lisbon."),
	).Loop().DontRecord()
	a, err := agent.NewReact(p, append([]agent.Option{agent.WithTools(weather)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	in := agent.Input{Text: "What's the weather in Lisbon?"}
	b.ReportAllocs()
	defer benchcpu.Report(b)()
	for b.Loop() {
		a.Reset()
		if _, err := a.Run(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReactStepEvents is BenchmarkReactStep with a sink in the context
// that discards events: the fake provider streams, so this is the cost of
// the streaming path and of building every event.
func BenchmarkReactStepEvents(b *testing.B) {
	weather := tool.Must(tool.New("weather", "Reports the weather in a city.",
		func(ctx context.Context, in benchArgs) (string, error) { return "sunny in " + in.City, nil }))
	p := fake.NewProvider(
		fake.Call("weather", `{"city":"Lisbon"}`),
		fake.Text("It is sunny in Lisbon."),
	).Loop().DontRecord()
	a, err := agent.NewReact(p, agent.WithTools(weather))
	if err != nil {
		b.Fatal(err)
	}
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(event.Event) {}))
	in := agent.Input{Text: "What's the weather in Lisbon?"}
	b.ReportAllocs()
	for b.Loop() {
		a.Reset()
		if _, err := a.Run(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

package agent_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
)

// constantModel answers every request at once with the same reply and
// usage, reading nothing of it: what a benchmark of it measures is the
// library's own cost.
var constantModel = provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{Message: provider.AssistantMessage("The answer is 42, as computed from the ledger."),
		Usage: provider.Usage{Requests: 1, InputTokens: 100, OutputTokens: 10}}, nil
})

// residentAt returns a resident whose conversation holds depth earlier
// consultations, and a function that puts it back there.
func residentAt(b *testing.B, depth int, opts ...agent.Option) (*agent.React, func()) {
	b.Helper()
	r, err := agent.NewReact(constantModel, opts...)
	if err != nil {
		b.Fatal(err)
	}
	for i := range depth {
		if _, err := r.Run(context.Background(), agent.Input{Text: "Question " + strconv.Itoa(i) + ": what is the total?"}); err != nil {
			b.Fatal(err)
		}
	}
	snap, err := r.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	return r, func() {
		if err := r.Restore(snap); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConsultation measures one consultation of a resident whose
// conversation already holds depth consultations (two messages each), on
// a model that answers at once without reading the request: the cost of
// the loop itself, which must not grow with the history. Every 4,096
// consultations the conversation is put back at its depth, outside the
// timer, so that each depth is measured near itself.
func BenchmarkConsultation(b *testing.B) {
	for _, depth := range []int{1, 100, 1_000, 10_000} {
		b.Run("depth="+strconv.Itoa(depth), func(b *testing.B) {
			r, reset := residentAt(b, depth, agent.WithoutCompaction())
			ctx := context.Background()
			in := agent.Input{Text: "What is the total?"}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if n++; n%4096 == 0 {
					b.StopTimer()
					reset()
					b.StartTimer()
				}
				if _, err := r.Run(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompaction measures one consultation that compacts a
// conversation at the default message bound (1,000 messages) down to its
// latest turns, with a summary that costs nothing to write: the
// library's cost of one compaction.
func BenchmarkCompaction(b *testing.B) {
	summary := func(context.Context, []provider.Message) (string, error) { return "The ledger was discussed.", nil }
	r, reset := residentAt(b, agent.DefaultCompactMessages/2, agent.WithCompaction(agent.Compaction{Summarize: summary}))
	ctx := context.Background()
	in := agent.Input{Text: "What is the total?"}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		reset()
		b.StartTimer()
		out, err := r.Run(ctx, in)
		if err != nil || out.Compactions != 1 {
			b.Fatalf("%d compactions, %v", out.Compactions, err)
		}
	}
}

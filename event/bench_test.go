package event_test

import (
	"context"
	"testing"

	"github.com/deputy-go/deputy/event"
)

// BenchmarkEmit measures two events sent through an Emitter to a sink that
// discards them: at the top level, and attributed to a sub-agent. It must
// not allocate.
func BenchmarkEmit(b *testing.B) {
	for _, sub := range []bool{false, true} {
		name := "top"
		if sub {
			name = "subagent"
		}
		b.Run(name, func(b *testing.B) {
			ctx := event.WithSink(context.Background(), event.SinkFunc(func(event.Event) {}))
			if sub {
				ctx = event.WithSubagent(ctx, "sub_1")
			}
			em := event.From(ctx)
			b.ReportAllocs()
			for b.Loop() {
				em.Emit(event.Event{Type: event.ToolCallArgs, ToolCallID: "call_1", Delta: "{}"})
				em.Emit(event.Event{Type: event.StepStarted, StepName: "run_1/step-1"})
			}
			if n := testing.AllocsPerRun(100, func() { em.Emit(event.Event{Type: event.StepFinished, StepName: "s"}) }); n != 0 {
				b.Errorf("Emit allocates %v times per event; want 0", n)
			}
		})
	}
}

package agent_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
)

// BenchmarkJournaledTurn is one turn of a lead (a model call that asks for
// a tool, the tool call, a model call that answers), streamed to a sink,
// without a journal and under a journal on SQLite: the journaled turn
// opens its journal, records both model answers and the call's result (one
// commit each), and deletes the journal at the end, as a served turn does.
func BenchmarkJournaledTurn(b *testing.B) {
	sink := event.SinkFunc(func(event.Event) {})
	for _, journaled := range []bool{false, true} {
		name := "unjournaled"
		if journaled {
			name = "journaled"
		}
		b.Run(name, func(b *testing.B) {
			p := fake.NewProvider(fake.Call("weather", `{"city":"Lisbon"}`), fake.Text("sunny")).Loop().DontRecord()
			a := newReact(b, p, agent.WithTools(weather(b)))
			ctx := event.WithSink(context.Background(), sink)
			st := journalStore(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				a.Reset()
				rctx := ctx
				turn := "turn-" + strconv.Itoa(i)
				i++
				if journaled {
					j, err := st.Journal(ctx, turn)
					if err != nil {
						b.Fatal(err)
					}
					rctx = agent.WithJournal(ctx, j)
				}
				if _, err := a.Run(rctx, agent.Input{Text: "Weather?"}); err != nil {
					b.Fatal(err)
				}
				if journaled {
					if err := st.DeleteJournal(ctx, turn); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

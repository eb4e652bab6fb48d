package provider_test

import (
	"context"
	"fmt"
	"log"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
)

// countEvents counts the deltas a run streams.
type countEvents struct{ deltas int }

func (c *countEvents) Emit(e event.Event) {
	if e.Type == event.TextMessageContent {
		c.deltas++
	}
}

// A provider wrapped with Wrap streams as it did, names its vendor as it
// did, and the middleware sees every call, streamed or not; a struct that
// embeds a provider and overrides Complete does not stream.
func TestWrapKeepsStreaming(t *testing.T) {
	inner := fake.NewProvider(fake.Text("one two three four five"), fake.Text("six seven")).Named("vendor", "m1")
	var calls int
	var usage provider.Usage
	wrapped := provider.Wrap(inner, func(ctx context.Context, req provider.Request, next provider.Next) (provider.Response, error) {
		calls++
		resp, err := next(ctx, req)
		usage = usage.Add(resp.Usage)
		return resp, err
	})
	if _, ok := wrapped.(provider.Streamer); !ok {
		t.Fatal("the wrapped provider does not stream")
	}
	if n, ok := wrapped.(provider.Namer); !ok || n.Name() != "vendor" {
		t.Fatalf("the wrapped provider's name: %v", n)
	}
	r, err := agent.NewReact(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	var sink countEvents
	if _, err := r.Run(event.WithSink(context.Background(), &sink), agent.Input{Text: "count"}); err != nil {
		t.Fatal(err)
	}
	if sink.deltas != 5 {
		t.Fatalf("the run streamed %d deltas, want the 5 words", sink.deltas)
	}
	if _, err := wrapped.Complete(context.Background(), provider.Request{Messages: []provider.Message{provider.UserMessage("again")}}); err != nil {
		t.Fatal(err)
	}
	if calls != 2 || usage.Requests != 2 {
		t.Fatalf("the middleware saw %d calls, usage %+v", calls, usage)
	}
	if _, ok := provider.Wrap(provider.Func(nil), nil).(provider.Streamer); ok {
		t.Fatal("wrapping a provider that does not stream made one that claims to")
	}

	type embedded struct{ provider.Provider }
	if _, ok := any(embedded{inner}).(provider.Streamer); ok {
		t.Fatal("an embedding struct streams: the doc's warning is wrong")
	}
}

// ExampleWrap counts what every call of a provider spends, without
// turning its streaming off.
func ExampleWrap() {
	var spent provider.Usage
	model := provider.Wrap(fake.NewProvider(fake.Text("hello there")), func(ctx context.Context, req provider.Request, next provider.Next) (provider.Response, error) {
		resp, err := next(ctx, req)
		spent = spent.Add(resp.Usage)
		return resp, err
	})
	_, streams := model.(provider.Streamer)
	r, err := agent.NewReact(model)
	if err != nil {
		log.Fatal(err)
	}
	out, err := r.Run(context.Background(), agent.Input{Text: "hi"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Answer, "| streams:", streams, "| requests:", spent.Requests)
	// Output: hello there | streams: true | requests: 1
}

package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/tool"
)

func weatherToolFor(t *testing.T) tool.Tool {
	t.Helper()
	type args struct {
		City string `json:"city"`
	}
	w, err := tool.New("weather", "Reports the weather.", func(ctx context.Context, in args) (string, error) {
		return "sunny in " + in.City, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestStreamYieldsTheRunsEvents(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := fake.NewProvider(
		fake.Call("weather", `{"city":"Lisbon"}`).Saying("Let me look."),
		fake.Text("Sunny in Lisbon."),
	)
	a, err := agent.NewReact(p, agent.WithName("assistant"), agent.WithTools(weatherToolFor(t)))
	if err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	for e, err := range agent.Stream(context.Background(), a, agent.Input{Text: "weather?"}) {
		if err != nil {
			t.Fatalf("run failed: %v", err)
		}
		got = append(got, e)
	}
	if problems := eventcheck.Check(got, eventcheck.Options{}); len(problems) > 0 {
		t.Fatalf("the stream does not conform:\n%s", strings.Join(problems, "\n"))
	}
	last := got[len(got)-1]
	if last.Type != event.RunFinished || string(last.Result) != `"Sunny in Lisbon."` {
		t.Errorf("last event %s with result %s, want RUN_FINISHED with the answer", last.Type, last.Result)
	}
	for _, e := range got {
		if e.Timestamp == 0 {
			t.Errorf("%s has no timestamp", e.Type)
		}
	}
	if got[0].ThreadID != got[0].RunID {
		t.Errorf("without a thread, RUN_STARTED's thread is its run id: %q vs %q", got[0].ThreadID, got[0].RunID)
	}
}

func TestStreamEndsWithTheRunsError(t *testing.T) {
	defer goleak.VerifyNone(t)
	boom := errors.New("model down")
	a, err := agent.NewReact(fake.NewProvider(fake.Error(boom)))
	if err != nil {
		t.Fatal(err)
	}
	var types []event.Type
	var final error
	for e, err := range agent.Stream(context.Background(), a, agent.Input{Text: "hi"}) {
		if err != nil {
			final = err
			continue
		}
		types = append(types, e.Type)
	}
	if !errors.Is(final, boom) {
		t.Fatalf("final error %v, want it to wrap %v", final, boom)
	}
	want := []event.Type{event.RunStarted, event.StepStarted, event.StepFinished, event.RunError}
	if !equalTypes(types, want) {
		t.Errorf("events %v, want %v (a failed step still closes)", types, want)
	}
}

func TestStreamStoppedEarlyCancelsTheRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Stopping after the first event must cancel the run and wait for it.
	p := holdsHi()
	a, err := agent.NewReact(p)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n := 0
	for _, err := range agent.Stream(context.Background(), a, agent.Input{Text: "hi"}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("saw %d events", n)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("stopping took %v: the run was not cancelled", d)
	}
	// The agent is free again: its cancelled run has ended.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := a.Run(ctx, agent.Input{Text: "again"}); err != nil || out.Answer != "ready" {
		t.Fatalf("a second run: %q, %v; want it to run at once", out.Answer, err)
	}
}

func TestStreamRepanics(t *testing.T) {
	defer goleak.VerifyNone(t)
	a := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		event.From(ctx).Emit(event.Event{Type: event.RunStarted, RunID: "r"})
		panic("agent bug")
	})
	defer func() {
		if p := recover(); p != "agent bug" {
			t.Fatalf("recovered %v, want the agent's panic", p)
		}
	}()
	for range agent.Stream(context.Background(), a, agent.Input{}) {
	}
	t.Fatal("Stream returned normally")
}

func TestStreamDropsEventsAfterTheRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	release := make(chan struct{})
	done := make(chan struct{})
	a := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		go func() { // misbehaves: emits after its run has returned
			defer close(done)
			<-release
			event.From(ctx).Emit(event.Event{Type: event.StepStarted, StepName: "late"})
		}()
		return agent.Output{}, nil
	})
	for e, err := range agent.Stream(context.Background(), a, agent.Input{}) {
		t.Fatalf("unexpected %v %v", e, err)
	}
	close(release)
	<-done
}

func equalTypes(a, b []event.Type) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestStreamBodyThatPanicsStillEndsTheRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := holdsHi()
	a, err := agent.NewReact(p)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "consumer bug" {
				t.Fatalf("recovered %v", r)
			}
		}()
		for range agent.Stream(context.Background(), a, agent.Input{Text: "hi"}) {
			panic("consumer bug")
		}
	}()
}

// holdsHi returns a model that holds the question "hi" until its caller
// gives up and answers any other at once with "ready": a run cancelled
// before it asks leaves nothing behind for the next run.
func holdsHi() *fake.Provider {
	return fake.NewProvider(fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if req.Messages[len(req.Messages)-1].Content == "hi" {
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}
		return provider.Response{Message: provider.AssistantMessage("ready")}, nil
	})).Loop()
}

// WithoutStreaming turns streaming off for a provider that streams: the
// provider's Complete is called, and the reply still reaches the sink,
// whole, in one TEXT_MESSAGE_CONTENT.
func TestWithoutStreamingCallsComplete(t *testing.T) {
	var calls atomic.Int64
	p := &piecesStreamer{text: []string{"one ", "two ", "three"}, calls: &calls}
	a := newReact(t, p, agent.WithName("lead"), agent.WithoutStreaming())
	var deltas []string
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		if e.Type == event.TextMessageContent {
			deltas = append(deltas, e.Delta)
		}
	}))
	out, err := a.Run(ctx, agent.Input{Text: "count"})
	if err != nil || out.Answer != "one two three" {
		t.Fatalf("%q, %v", out.Answer, err)
	}
	if p.streamed.Load() != 0 || calls.Load() != 1 {
		t.Errorf("%d streamed calls, %d in all; want Complete called once", p.streamed.Load(), calls.Load())
	}
	if len(deltas) != 1 || deltas[0] != "one two three" {
		t.Errorf("deltas %q, want the whole reply once", deltas)
	}
}

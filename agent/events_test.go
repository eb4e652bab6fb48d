package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/internal/eventcheck"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
)

// collapse returns the event types in order, with runs of the same type
// written once.
func collapse(events []event.Event) []event.Type {
	var out []event.Type
	for _, e := range events {
		if len(out) == 0 || out[len(out)-1] != e.Type {
			out = append(out, e.Type)
		}
	}
	return out
}

func joinDeltas(events []event.Event, t event.Type, match func(event.Event) bool) (s string, n int) {
	for _, e := range events {
		if e.Type == t && match(e) {
			s += e.Delta
			n++
		}
	}
	return s, n
}

func TestReactEvents(t *testing.T) {
	const args = `{"city":"Lisbon"}`
	const answer = "It is sunny in Lisbon today, 21 degrees."
	script := func() *fake.Provider {
		return fake.NewProvider(
			fake.Call("weather", args).Saying("Let me check."),
			fake.Text(answer),
		)
	}
	tests := []struct {
		name     string
		p        func() provider.Provider
		streamed bool
	}{
		{"streaming provider", func() provider.Provider { return script() }, true},
		{"plain provider", func() provider.Provider { return provider.Func(script().Complete) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			a := newReact(t, tt.p(), agent.WithTools(weather(t)))
			out, err := a.Run(event.WithSink(t.Context(), rec), agent.Input{Text: "Weather?"})
			if err != nil {
				t.Fatal(err)
			}
			events := rec.all()
			want := []event.Type{
				event.RunStarted,
				event.StepStarted,
				event.TextMessageStart, event.TextMessageContent, event.TextMessageEnd,
				event.ToolCallStart, event.ToolCallArgs, event.ToolCallEnd,
				event.Custom, // the model call's usage
				event.ToolCallResult,
				event.StepFinished,
				event.StepStarted,
				event.TextMessageStart, event.TextMessageContent, event.TextMessageEnd,
				event.Custom,
				event.StepFinished,
				event.RunFinished,
			}
			if diff := cmp.Diff(want, collapse(events)); diff != "" {
				t.Errorf("event types (-want +got):\n%s", diff)
			}

			call := out.Messages[1].ToolCalls[0]
			gotArgs, nArgs := joinDeltas(events, event.ToolCallArgs, func(e event.Event) bool { return e.ToolCallID == call.ID })
			if gotArgs != args {
				t.Errorf("TOOL_CALL_ARGS join to %q, want %q", gotArgs, args)
			}
			lastMsg := rec.of(event.TextMessageStart)[1].MessageID
			gotText, nText := joinDeltas(events, event.TextMessageContent, func(e event.Event) bool { return e.MessageID == lastMsg })
			if gotText != answer || gotText != out.Answer {
				t.Errorf("TEXT_MESSAGE_CONTENT of the answer join to %q, want %q", gotText, answer)
			}
			if tt.streamed && (nText < 2 || nArgs < 2) {
				t.Errorf("a streaming provider gave %d text and %d argument deltas: want pieces", nText, nArgs)
			}
			if !tt.streamed && (nText != 1 || nArgs != 1) {
				t.Errorf("a plain provider gave %d text and %d argument deltas, want 1 each", nText, nArgs)
			}

			start, result := rec.of(event.ToolCallStart)[0], rec.of(event.ToolCallResult)[0]
			if start.ToolCallID != call.ID || start.ToolCallName != "weather" || result.ToolCallID != call.ID || result.Content != "sunny in Lisbon" {
				t.Errorf("tool call events %+v, %+v for call %+v", start, result, call)
			}
			if start.ParentMessageID != rec.of(event.TextMessageStart)[0].MessageID {
				t.Errorf("TOOL_CALL_START parent %q, want the step's message", start.ParentMessageID)
			}
			for _, e := range events {
				if e.Timestamp != 0 {
					t.Errorf("%s has a timestamp: Emit leaves the time to the sink", e.Type)
				}
			}
			rs, rf := rec.of(event.RunStarted)[0], rec.of(event.RunFinished)[0]
			if rs.RunID != out.RunID || rf.RunID != out.RunID || string(rf.Result) != string(event.JSONString(answer)) {
				t.Errorf("run events %+v, %+v for run %s", rs, rf, out.RunID)
			}
			steps := rec.of(event.StepStarted)
			if steps[0].StepName == steps[1].StepName || !strings.HasPrefix(steps[0].StepName, out.RunID) {
				t.Errorf("step names %q, %q", steps[0].StepName, steps[1].StepName)
			}
		})
	}
}

func TestReactRunErrorEvent(t *testing.T) {
	rec := &recorder{}
	a := newReact(t, fake.NewProvider(fake.Call("weather", `{"city":"x"}`)), agent.WithTools(weather(t)), agent.WithMaxSteps(1))
	_, err := a.Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
	if !errors.Is(err, agent.ErrMaxSteps) {
		t.Fatal(err)
	}
	got := rec.of(event.RunError)
	if len(got) != 1 || got[0].Code != "max_steps" || got[0].Message != err.Error() {
		t.Errorf("RUN_ERROR events %+v", got)
	}
	if len(rec.of(event.RunFinished)) != 0 {
		t.Error("a failed run emitted RUN_FINISHED")
	}
}

// A streaming provider whose stream fails, or breaks its contract.
func TestReactStreamFailures(t *testing.T) {
	errBroken := errors.New("connection reset")
	tests := []struct {
		name    string
		deltas  []provider.Delta
		err     error
		wantErr string
	}{
		{"error mid-stream", []provider.Delta{{Text: "Hel"}}, errBroken, "connection reset"},
		{"negative call index", []provider.Delta{{Text: "Hel"}, {ToolCall: provider.ToolCallDelta{Index: -1, Name: "weather"}}}, nil, "tool call index -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			a := newReact(t, streamer{deltas: tt.deltas, err: tt.err})
			_, err := a.Run(event.WithSink(t.Context(), rec), agent.Input{Text: "hi"})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if got := len(rec.of(event.TextMessageStart)); got != len(rec.of(event.TextMessageEnd)) || got != 1 {
				t.Errorf("%d TEXT_MESSAGE_START, %d TEXT_MESSAGE_END: the open message must be closed", got, len(rec.of(event.TextMessageEnd)))
			}
		})
	}
}

// streamer is a Provider that streams deltas and then answers with resp,
// or fails with err.
type streamer struct {
	deltas []provider.Delta
	resp   provider.Response
	err    error
}

func (s streamer) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return provider.Response{}, errors.New("streamer: Complete is not used when events are on")
}

func (s streamer) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	for _, d := range s.deltas {
		if onDelta == nil {
			break
		}
		if err := onDelta(d); err != nil {
			return provider.Response{}, err
		}
	}
	if s.err != nil {
		return provider.Response{}, s.err
	}
	return s.resp, nil
}

// With no sink, events cost nothing: a run allocates the same as with events
// explicitly off. With a sink, the events cost a few allocations per model
// call (the step's names, the state of its streamed reply, the usage the
// call reports) and the copy of
// the answer that RUN_FINISHED carries as its JSON result; nothing per
// event.
func TestReactEventsOffAllocations(t *testing.T) {
	p := fake.NewProvider(fake.Call("weather", `{"city":"Lisbon"}`), fake.Text("sunny")).Loop().DontRecord()
	a := newReact(t, p, agent.WithTools(weather(t)))
	allocs := func(ctx context.Context) float64 {
		return testing.AllocsPerRun(50, func() {
			a.Reset()
			if _, err := a.Run(ctx, agent.Input{Text: "Weather?"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	var texts, calls atomic.Int64 // counted without allocating
	counter := event.SinkFunc(func(e event.Event) {
		switch e.Type {
		case event.TextMessageContent:
			texts.Add(1)
		case event.ToolCallStart:
			calls.Add(1)
		}
	})
	none := allocs(context.Background())
	off := allocs(event.WithSink(context.Background(), nil))
	on := allocs(event.WithSink(context.Background(), counter))
	if none != off {
		t.Errorf("a run allocates %v times with no sink and %v with events turned off", none, off)
	}
	if texts.Load() == 0 || calls.Load() == 0 {
		t.Fatalf("the sink saw %d TEXT_MESSAGE_CONTENT and %d TOOL_CALL_START events; want some of each", texts.Load(), calls.Load())
	}
	const steps, perStep = 2, 6 // the run makes two model calls
	if on > none+steps*perStep+1 && !raceEnabled {
		t.Errorf("a run allocates %v times with no sink and %v with a sink: events should allocate at most %d per model call and the result of RUN_FINISHED", none, on, perStep)
	}
}

// A stream whose tool calls carry no ids: the id the events announce is
// the one the call keeps and its result names.
func TestReactStreamWithoutIDs(t *testing.T) {
	final := provider.Response{Message: provider.AssistantMessage("",
		provider.ToolCall{Name: "weather", Arguments: json.RawMessage(`{"city":"Faro"}`)})}
	first := streamer{deltas: []provider.Delta{
		{ToolCall: provider.ToolCallDelta{Index: 0, Name: "weather", Arguments: `{"city":`}},
		{ToolCall: provider.ToolCallDelta{Index: 0, Arguments: `"Faro"}`}},
	}, resp: final}
	second := streamer{deltas: []provider.Delta{{Text: "Sunny."}}, resp: provider.Response{Message: provider.AssistantMessage("Sunny.")}}
	step := 0
	p := streamFunc(func(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
		step++
		if step == 1 {
			return first.Stream(ctx, req, onDelta)
		}
		return second.Stream(ctx, req, onDelta)
	})
	rec := &recorder{}
	a := newReact(t, p, agent.WithTools(weather(t)))
	out, err := a.Run(event.WithSink(t.Context(), rec), agent.Input{Text: "Weather in Faro?"})
	if err != nil {
		t.Fatal(err)
	}
	id := out.Messages[1].ToolCalls[0].ID
	if id == "" || final.Message.ToolCalls[0].ID != "" {
		t.Fatalf("call id %q; the provider's response was changed: %+v", id, final.Message.ToolCalls)
	}
	for _, typ := range []event.Type{event.ToolCallStart, event.ToolCallArgs, event.ToolCallEnd, event.ToolCallResult} {
		for _, e := range rec.of(typ) {
			if e.ToolCallID != id {
				t.Errorf("%s names call %q, want %q", typ, e.ToolCallID, id)
			}
		}
	}
	if args, _ := joinDeltas(rec.all(), event.ToolCallArgs, func(event.Event) bool { return true }); args != `{"city":"Faro"}` {
		t.Errorf("TOOL_CALL_ARGS join to %q", args)
	}
	if out.Messages[2].ToolCallID != id || out.Messages[2].Content != "sunny in Faro" {
		t.Errorf("result %+v", out.Messages[2])
	}
}

// streamFunc is a Provider that only streams.
type streamFunc func(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error)

func (f streamFunc) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return provider.Response{}, errors.New("streamFunc: Complete is not used when events are on")
}

func (f streamFunc) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	return f(ctx, req, onDelta)
}

// However a stream gives its tool calls' ids (late, twice, or not at all
// because it left the call out of its deltas), every call in the reply has
// exactly one TOOL_CALL_START, under the id its result names.
func TestReactStreamIDsMatchEvents(t *testing.T) {
	faro := json.RawMessage(`{"city":"Faro"}`)
	tc := func(i int, id, name, args string) provider.Delta {
		return provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, ID: id, Name: name, Arguments: args}}
	}
	tests := []struct {
		name   string
		deltas []provider.Delta
		calls  []provider.ToolCall
	}{
		{"id on a later fragment",
			[]provider.Delta{tc(0, "", "weather", `{"city":`), tc(0, "call_late", "", `"Faro"}`)},
			[]provider.ToolCall{{ID: "call_late", Name: "weather", Arguments: faro}}},
		{"two calls with one id",
			[]provider.Delta{tc(0, "dup", "weather", string(faro)), tc(1, "dup", "weather", string(faro))},
			[]provider.ToolCall{{ID: "dup", Name: "weather", Arguments: faro}, {ID: "dup", Name: "weather", Arguments: faro}}},
		{"call missing from the deltas",
			[]provider.Delta{{Text: "Checking."}},
			[]provider.ToolCall{{ID: "call_quiet", Name: "weather", Arguments: faro}}},
		{"call missing, without an id",
			nil,
			[]provider.ToolCall{{Name: "weather", Arguments: faro}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			replies := []streamer{
				{deltas: tt.deltas, resp: provider.Response{Message: provider.AssistantMessage("", tt.calls...)}},
				{deltas: []provider.Delta{{Text: "Sunny."}}, resp: provider.Response{Message: provider.AssistantMessage("Sunny.")}},
			}
			step := 0
			p := streamFunc(func(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
				step++
				return replies[step-1].Stream(ctx, req, onDelta)
			})
			rec := &recorder{}
			out, err := newReact(t, p, agent.WithTools(weather(t))).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "Weather in Faro?"})
			if err != nil {
				t.Fatal(err)
			}
			calls := out.Messages[1].ToolCalls
			starts := map[string]int{}
			for _, e := range rec.of(event.ToolCallStart) {
				starts[e.ToolCallID]++
			}
			results := map[string]bool{}
			for _, e := range rec.of(event.ToolCallResult) {
				results[e.ToolCallID] = true
			}
			if len(starts) != len(calls) {
				t.Errorf("TOOL_CALL_START for %v; the reply has %d calls", starts, len(calls))
			}
			for _, c := range calls {
				if starts[c.ID] != 1 || !results[c.ID] {
					t.Errorf("call %q: %d TOOL_CALL_START, result event %v; want 1 and true", c.ID, starts[c.ID], results[c.ID])
				}
			}
			if problems := eventcheck.Check(rec.all(), eventcheck.Options{}); len(problems) > 0 {
				t.Errorf("events break the protocol: %v", problems)
			}
		})
	}
}

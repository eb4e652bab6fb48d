package event_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/event"
)

type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) Emit(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func TestNoSink(t *testing.T) {
	ctx := context.Background()
	if event.From(ctx).Enabled() || event.SubagentRunID(ctx) != "" {
		t.Error("a bare context has events on or an attribution")
	}
	if got := event.WithSubagent(ctx, "sub_1"); got != ctx {
		t.Error("WithSubagent without a sink made a new context")
	}
	off := event.WithSink(ctx, nil)
	if event.From(off).Enabled() {
		t.Error("WithSink(nil) left events on")
	}
	if event.From(event.WithSink(ctx, event.SinkFunc(nil))).Enabled() {
		t.Error("WithSink(SinkFunc(nil)) left events on; emitting would call a nil function")
	}
	event.From(event.WithSink(ctx, event.SinkFunc(nil))).Emit(event.Event{Type: event.StepStarted, StepName: "s"})
	allocs := testing.AllocsPerRun(100, func() {
		event.From(ctx).Emit(event.Event{Type: event.StepStarted, StepName: "s"})
		event.From(off).Emit(event.Event{Type: event.StepStarted, StepName: "s"})
	})
	if allocs != 0 {
		t.Errorf("Emit with events off allocates %v times", allocs)
	}
}

func TestEmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		ctx := event.WithSink(context.Background(), rec)
		sub := event.WithSubagent(ctx, "sub_1")
		subsub := event.WithSubagent(sub, "sub_2")

		event.From(ctx).Emit(event.Event{Type: event.RunStarted, RunID: "run_1"})
		event.From(ctx).Emit(event.Event{Type: event.StepStarted, StepName: "s1", Timestamp: 42})
		event.From(sub).Emit(event.Event{Type: event.RunStarted, RunID: "run_child"}) // dropped: run-level under a sub-agent
		event.From(sub).Emit(event.Event{Type: event.TextMessageContent, MessageID: "m", Delta: "hi"})
		event.From(sub).Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_2", ParentSubagentRunID: "sub_1"})
		event.From(subsub).Emit(event.Event{Type: event.ToolCallStart, ToolCallID: "c"})
		event.From(subsub).Emit(event.Event{Type: event.RunError, Message: "x"}) // dropped
		event.From(sub).Emit(event.Event{Type: event.RunFinished})               // dropped
		event.From(ctx).Emit(event.Event{Type: event.RunFinished, RunID: "run_1"})

		want := []event.Event{
			// Emit leaves the time to the sink (see Stamped); a run-level
			// event gets the run id as its thread when none is set.
			{Type: event.RunStarted, RunID: "run_1", ThreadID: "run_1"},
			{Type: event.StepStarted, StepName: "s1", Timestamp: 42},
			{Type: event.TextMessageContent, MessageID: "m", Delta: "hi", SubagentRunID: "sub_1"},
			{Type: event.SubagentStarted, SubagentRunID: "sub_2", ParentSubagentRunID: "sub_1"},
			// A sub-agent's calls are named apart from the tree's others.
			{Type: event.ToolCallStart, ToolCallID: "sub_2-c", SubagentRunID: "sub_2"},
			{Type: event.RunFinished, RunID: "run_1", ThreadID: "run_1"},
		}
		if diff := cmp.Diff(want, rec.events); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if event.SubagentRunID(sub) != "sub_1" || event.SubagentRunID(subsub) != "sub_2" || event.SubagentRunID(ctx) != "" {
			t.Error("SubagentRunID does not match the contexts")
		}
	})
}

// An Emitter taken with From sends what Emit with its context sends.
func TestFrom(t *testing.T) {
	var zero event.Emitter
	zero.Emit(event.Event{Type: event.StepStarted}) // drops it
	if zero.Enabled() || zero.SubagentRunID() != "" {
		t.Error("the zero Emitter has events on or an attribution")
	}
	base := event.WithThread(context.Background(), "thread_1")
	if event.From(base).Enabled() || event.From(event.WithSink(base, nil)).Enabled() {
		t.Error("an Emitter without a sink has events on")
	}
	sink := event.WithSink(base, &recorder{})
	emitted := []event.Event{
		{Type: event.RunStarted, RunID: "run_1"},
		{Type: event.StepStarted, StepName: "s1"},
		{Type: event.TextMessageContent, MessageID: "m"}, // dropped: empty delta
		{Type: event.ToolCallArgs, ToolCallID: "c", Delta: "{}"},
		{Type: event.RunFinished, RunID: "run_1"},
	}
	for _, ctx := range []context.Context{base, sink, event.WithSubagent(sink, "sub_1")} {
		byCtx, byEmitter := &recorder{}, &recorder{}
		em := event.From(event.WithSink(ctx, byEmitter))
		ctx = event.WithSink(ctx, byCtx)
		for _, e := range emitted {
			event.From(ctx).Emit(e)
			em.Emit(e)
		}
		if diff := cmp.Diff(byCtx.events, byEmitter.events); diff != "" {
			t.Errorf("Emitter events (-Emit +Emitter):\n%s", diff)
		}
		if !em.Enabled() || em.SubagentRunID() != event.SubagentRunID(ctx) {
			t.Errorf("Emitter: enabled %v, attributed to %q; the context to %q", em.Enabled(), em.SubagentRunID(), event.SubagentRunID(ctx))
		}
	}
	off := event.From(context.Background())
	if allocs := testing.AllocsPerRun(100, func() { off.Emit(event.Event{Type: event.StepStarted, StepName: "s"}) }); allocs != 0 {
		t.Errorf("Emit with events off allocates %v times", allocs)
	}
}

// A new sink keeps the attribution; turning events off under a sub-agent
// turns them off.
func TestWithSinkKeepsAttribution(t *testing.T) {
	first, second := &recorder{}, &recorder{}
	sub := event.WithSubagent(event.WithSink(context.Background(), first), "sub_1")
	moved := event.WithSink(sub, second)
	event.From(moved).Emit(event.Event{Type: event.StepStarted, Timestamp: 1})
	if len(first.events) != 0 || len(second.events) != 1 || second.events[0].SubagentRunID != "sub_1" {
		t.Errorf("first %v, second %v", first.events, second.events)
	}
	off := event.WithSink(sub, nil)
	event.From(off).Emit(event.Event{Type: event.StepStarted})
	if event.From(off).Enabled() || len(first.events) != 0 || event.SubagentRunID(off) != "sub_1" {
		t.Error("events still flow after WithSink(nil)")
	}
}

func TestRunLevel(t *testing.T) {
	for _, typ := range []event.Type{event.RunStarted, event.RunFinished, event.RunError} {
		if !typ.RunLevel() {
			t.Errorf("%s is run-level", typ)
		}
	}
	for _, typ := range []event.Type{event.StepStarted, event.ToolCallResult, event.SubagentStarted, event.SubagentFinished, event.SubagentError, event.TextMessageContent} {
		if typ.RunLevel() {
			t.Errorf("%s is not run-level", typ)
		}
	}
}

// The JSON is AG-UI's: camelCase names, empty fields left out.
func TestEventJSON(t *testing.T) {
	tests := []struct {
		e    event.Event
		want string
	}{
		{event.Event{Type: event.RunStarted, Timestamp: 1, ThreadID: "t", RunID: "r", ParentRunID: "p"},
			`{"type":"RUN_STARTED","timestamp":1,"threadId":"t","runId":"r","parentRunId":"p"}`},
		{event.Event{Type: event.ToolCallStart, ToolCallID: "c", ToolCallName: "search", ParentMessageID: "m"},
			`{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"search","parentMessageId":"m"}`},
		{event.Event{Type: event.ToolCallResult, MessageID: "m", ToolCallID: "c", Content: "42", Role: "tool"},
			`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":"42","role":"tool"}`},
		{event.Event{Type: event.SubagentStarted, SubagentRunID: "s", Name: "researcher", Description: "finds things", ParentSubagentRunID: "s0", ParentToolCallID: "c"},
			`{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"researcher","description":"finds things","parentSubagentRunId":"s0","parentToolCallId":"c"}`},
		{event.Event{Type: event.SubagentFinished, SubagentRunID: "s", Result: json.RawMessage(`{"status":"success"}`)},
			`{"type":"SUBAGENT_FINISHED","subagentRunId":"s","result":{"status":"success"}}`},
		{event.Event{Type: event.RunError, Message: "boom", Code: "error"},
			`{"type":"RUN_ERROR","message":"boom","code":"error"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.e)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tt.want {
			t.Errorf("JSON:\n%s\nwant:\n%s", b, tt.want)
		}
		var back event.Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.e, back); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

func TestConcurrentEmit(t *testing.T) {
	rec := &recorder{}
	ctx := event.WithSink(context.Background(), rec)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			sub := event.WithSubagent(ctx, "sub")
			for range 10 {
				event.From(sub).Emit(event.Event{Type: event.StepStarted, StepName: string(rune('a' + i))})
			}
		})
	}
	wg.Wait()
	if len(rec.events) != 200 {
		t.Errorf("%d events, want 200", len(rec.events))
	}
}

func TestSinkFunc(t *testing.T) {
	var got []event.Type
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) { got = append(got, e.Type) }))
	event.From(ctx).Emit(event.Event{Type: event.StepStarted})
	if diff := cmp.Diff([]event.Type{event.StepStarted}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWithSubagent(t *testing.T) {
	rec := &recorder{}
	ctx := event.WithSink(context.Background(), rec)
	ids := []string{"sub_a", "sub_b", "sub_c"}
	for _, id := range ids {
		sub := event.WithSubagent(ctx, id)
		if got := event.SubagentRunID(sub); got != id {
			t.Fatalf("the context is attributed to %q, want %q", got, id)
		}
		event.From(sub).Emit(event.Event{Type: event.StepStarted, StepName: "s"})
	}
	// Each event still names its own invocation after later ones were made.
	rec.mu.Lock()
	for i, e := range rec.events {
		if e.SubagentRunID != ids[i] {
			t.Errorf("event %d attributed to %q, want %q", i, e.SubagentRunID, ids[i])
		}
	}
	rec.mu.Unlock()

	if n := testing.AllocsPerRun(100, func() { event.WithSubagent(ctx, "sub_a") }); n > 2 {
		t.Errorf("WithSubagent makes %v allocations; want at most 2: the scope and the context", n)
	}
	bare := context.Background()
	if sub := event.WithSubagent(bare, "sub_a"); sub != bare {
		t.Errorf("without a sink: context %v; want the same context", sub)
	}
}

package event_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/deputy-go/deputy/event"
)

// Whoever runs an agent puts a sink in the context; everything that runs
// under it emits there.
func ExampleWithSink() {
	sink := event.SinkFunc(func(e event.Event) {
		fmt.Println(e.Type, e.StepName)
	})
	ctx := event.WithSink(context.Background(), sink)
	event.From(ctx).Emit(event.Event{Type: event.StepStarted, StepName: "plan"})
	event.From(ctx).Emit(event.Event{Type: event.StepFinished, StepName: "plan"})

	// Without a sink, Emit does nothing.
	event.From(context.Background()).Emit(event.Event{Type: event.StepStarted, StepName: "lost"})
	fmt.Println(event.From(context.Background()).Enabled())
	// Output:
	// STEP_STARTED plan
	// STEP_FINISHED plan
	// false
}

// Events emitted under a sub-agent carry its invocation id; its own
// run-level events are left out of the parent's stream.
func ExampleWithSubagent() {
	sink := event.SinkFunc(func(e event.Event) {
		fmt.Printf("%s subagent=%q\n", e.Type, e.SubagentRunID)
	})
	parent := event.WithSink(context.Background(), sink)
	child := event.WithSubagent(parent, "sub_1")

	event.From(parent).Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_1", Name: "researcher"})
	event.From(child).Emit(event.Event{Type: event.RunStarted}) // dropped
	event.From(child).Emit(event.Event{Type: event.TextMessageContent, Delta: "found it"})
	event.From(parent).Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: "sub_1"})
	// Output:
	// SUBAGENT_STARTED subagent="sub_1"
	// TEXT_MESSAGE_CONTENT subagent="sub_1"
	// SUBAGENT_FINISHED subagent="sub_1"
}

// Events encode as AG-UI JSON.
func ExampleEvent() {
	b, err := json.Marshal(event.Event{
		Type:         event.ToolCallStart,
		Timestamp:    1700000000000,
		ToolCallID:   "call_1",
		ToolCallName: "search",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
	// Output: {"type":"TOOL_CALL_START","timestamp":1700000000000,"toolCallId":"call_1","toolCallName":"search"}
}

// A tool of one's own that runs an agent as a sub-agent (the sub-agent
// tools of package subagent do this for theirs) announces the invocation
// under an id it chooses, and runs the agent under a context attributed to
// that id, so that a UI draws the agent's events inside the call.
func ExampleWithSubagent_ownTool() {
	const runID = "sub_researcher_1"
	sink := event.SinkFunc(func(e event.Event) {
		fmt.Println(e.Type, e.SubagentRunID == runID)
	})
	parent := event.WithSink(context.Background(), sink)
	child := event.WithSubagent(parent, runID)

	event.From(parent).Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: runID, Name: "researcher"})
	event.From(child).Emit(event.Event{Type: event.TextMessageContent, Delta: "found it"})
	event.From(parent).Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: runID, Result: event.JSONString("found it")})
	fmt.Println(event.SubagentRunID(child) == runID)
	// Output:
	// SUBAGENT_STARTED true
	// TEXT_MESSAGE_CONTENT true
	// SUBAGENT_FINISHED true
	// true
}

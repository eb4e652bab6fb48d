// Package event is deputy's vocabulary of lifecycle and attribution events.
//
// Events follow the AG-UI protocol: the type names (RUN_STARTED,
// TOOL_CALL_START, SUBAGENT_STARTED, …) and the camelCase JSON field names are
// AG-UI's, so a stream of them can be sent to AG-UI clients as it is.
//
// # Sinks
//
// Events travel to a Sink carried by the context. Code that runs agents puts
// a sink in the context with WithSink; the ReAct loop and the sub-agent tools
// emit into whatever sink the context holds, through the Emitter that From
// returns: From looks the sink up once, and Emitter.Emit sends each event.
// When no sink is set, emitting costs nothing; Emitter.Enabled tells code
// that must do work to build an event whether anyone listens. Emitting does
// not read the clock: a sink that delivers events stamps them (Stamped).
// SinkFunc makes a Sink of a function; subagent.Tree is a ready-made one
// that builds the tree of what a run delegated.
//
// # Sub-agents and threads
//
// A sub-agent's events are attributed: WithSubagent marks a context as
// belonging to one sub-agent invocation, and every event emitted under it
// carries that invocation's id in SubagentRunID. The child's own run-level
// events (RUN_STARTED, RUN_FINISHED, RUN_ERROR) are not forwarded, because in
// the parent's stream the SUBAGENT_* events stand for them. SubagentRunID
// reads the attribution of a context. The tool calls of a sub-agent's own
// agent carry, in its events, ids named apart from the rest of the tree's
// (CallID): a model may give its calls the ids another agent's model gave,
// and a client tells every call of a stream apart.
//
// WithThread names the conversation (AG-UI's thread) that RUN_STARTED and
// RUN_FINISHED carry; without it they carry their own run id as the thread.
// ThreadID reads it.
//
// # JSON
//
// An Event encodes (MarshalJSON, AppendJSON) to exactly the JSON fields that
// @ag-ui/core 1.0.0 defines for its type, so an AG-UI client accepts it;
// what the protocol has no field for (a sub-agent's usage and model) goes
// in the event's metadata, and UnmarshalJSON reads it back from there, so
// that a Go client decoding a stream with json.Unmarshal has it in Usage
// and Model. JSONString encodes text as a Result.
package event

import (
	"context"
	"encoding/json"
	"time"
)

// Type is an AG-UI event type.
type Type string

// The event types deputy emits.
const (
	RunStarted         Type = "RUN_STARTED"
	RunFinished        Type = "RUN_FINISHED"
	RunError           Type = "RUN_ERROR"
	StepStarted        Type = "STEP_STARTED"
	StepFinished       Type = "STEP_FINISHED"
	TextMessageStart   Type = "TEXT_MESSAGE_START"
	TextMessageContent Type = "TEXT_MESSAGE_CONTENT"
	TextMessageEnd     Type = "TEXT_MESSAGE_END"
	ToolCallStart      Type = "TOOL_CALL_START"
	ToolCallArgs       Type = "TOOL_CALL_ARGS"
	ToolCallEnd        Type = "TOOL_CALL_END"
	ToolCallResult     Type = "TOOL_CALL_RESULT"
	SubagentStarted    Type = "SUBAGENT_STARTED"
	SubagentFinished   Type = "SUBAGENT_FINISHED"
	SubagentError      Type = "SUBAGENT_ERROR"
	// Custom is AG-UI's CUSTOM event: Name says what it is, Value holds
	// it. deputy emits it for what AG-UI has no event of its own for,
	// such as a call waiting for admission (provider.AdmissionEvent) or
	// work a limit refused.
	Custom Type = "CUSTOM"
)

// RunLevel reports whether t describes a run as a whole. Such events never
// carry a sub-agent attribution.
func (t Type) RunLevel() bool { return t == RunStarted || t == RunFinished || t == RunError }

// Event is one AG-UI event. Which fields are set depends on Type; the JSON
// encoding leaves the others out.
type Event struct {
	Type Type `json:"type"`
	// Timestamp is milliseconds since the Unix epoch, set by the sink that
	// delivers the event (see Stamped); zero means not stamped.
	Timestamp int64 `json:"timestamp,omitempty"`

	// Run identity (RUN_*).
	ThreadID    string `json:"threadId,omitempty"`
	RunID       string `json:"runId,omitempty"`
	ParentRunID string `json:"parentRunId,omitempty"`

	// Steps (STEP_*).
	StepName string `json:"stepName,omitempty"`

	// Text messages (TEXT_MESSAGE_*) and the message of a tool result.
	MessageID string `json:"messageId,omitempty"`
	Role      string `json:"role,omitempty"`
	Delta     string `json:"delta,omitempty"`

	// Tool calls (TOOL_CALL_*).
	ToolCallID      string `json:"toolCallId,omitempty"`
	ToolCallName    string `json:"toolCallName,omitempty"`
	ParentMessageID string `json:"parentMessageId,omitempty"`
	Content         string `json:"content,omitempty"`

	// Sub-agents: SubagentRunID attributes any event to a sub-agent
	// invocation and is the subject of the SUBAGENT_* events.
	SubagentRunID       string `json:"subagentRunId,omitempty"`
	Name                string `json:"name,omitempty"`
	Description         string `json:"description,omitempty"`
	ParentSubagentRunID string `json:"parentSubagentRunId,omitempty"`
	ParentToolCallID    string `json:"parentToolCallId,omitempty"`

	// Outcomes: the result on RUN_FINISHED and SUBAGENT_FINISHED, as JSON;
	// Message and Code on RUN_ERROR and SUBAGENT_ERROR. deputy's runs and
	// sub-agents finish with text (the answer, the tool result), which they
	// put here as a JSON string (JSONString); json.Unmarshal reads it back.
	Result  json.RawMessage `json:"result,omitempty"`
	Message string          `json:"message,omitempty"`
	Code    string          `json:"code,omitempty"`
	// Outcome, on RUN_FINISHED and SUBAGENT_FINISHED, is AG-UI's outcome
	// object: {"type":"success"}, {"type":"cancelled"},
	// {"type":"interrupt","interrupts":[…]} for a run that waits for
	// answers, or {"type":"suspended","interruptIds":[…]} for a sub-agent
	// invocation that does; not set means success. Usage, on
	// RUN_FINISHED, SUBAGENT_FINISHED and SUBAGENT_ERROR, is AG-UI's array
	// of TokenUsage: what the run, or the sub-agent invocation with its own
	// sub-agents, spent per provider and model (on SUBAGENT_* it is
	// encoded inside "metadata" and decoded from there; see AppendJSON
	// and UnmarshalJSON). Both must be valid JSON
	// when set.
	Outcome json.RawMessage `json:"outcome,omitempty"`
	Usage   json.RawMessage `json:"usage,omitempty"`
	// Model, on SUBAGENT_FINISHED and SUBAGENT_ERROR, is the model that
	// answered the sub-agent's first request ("" when it made none); on
	// SUBAGENT_STARTED, the model the sub-agent was set to run on, when the
	// spawn tool chose it from a menu (subagent.WithModelMenu). It is
	// encoded inside "metadata" like Usage.
	Model string `json:"model,omitempty"`
	// Value, on CUSTOM, is the event's value as JSON.
	Value json.RawMessage `json:"value,omitempty"`
}

// Sink receives events. Emit must be safe for concurrent use: the children of
// a fan-out emit from their own goroutines. Emit must not retain a pointer
// into the event beyond the call; the Event value itself may be kept.
type Sink interface {
	Emit(e Event)
}

// Stamped returns a sink that stamps the current time on each event that
// has none, then passes it to s. Emit does not read the clock, which is
// costly on some machines, so that a sink that has no use for the time (one
// that counts or discards) does not pay for it; a sink that delivers events
// to a UI wraps itself with Stamped. The sink is called as the event
// happens, so the time is the event's.
func Stamped(s Sink) Sink {
	return SinkFunc(func(e Event) {
		if e.Timestamp == 0 {
			e.Timestamp = time.Now().UnixMilli()
		}
		s.Emit(e)
	})
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(e Event)

// Emit calls f(e).
func (f SinkFunc) Emit(e Event) { f(e) }

type scopeKey struct{}

type scope struct {
	send     func(Event) // the sink's Emit; nil when events are off
	subagent string
	thread   string
}

// WithSink returns a context whose events go to s. A nil s, or a nil
// SinkFunc, turns events off. The sub-agent attribution and the thread of
// ctx, if any, are kept.
func WithSink(ctx context.Context, s Sink) context.Context {
	sc := scope{send: sendOf(s)}
	if old, ok := ctx.Value(scopeKey{}).(*scope); ok {
		sc.subagent, sc.thread = old.subagent, old.thread
	}
	return context.WithValue(ctx, scopeKey{}, &sc)
}

// WithSubagent returns a context whose events are attributed to the sub-agent
// invocation runID. It returns ctx itself when ctx has no sink.
func WithSubagent(ctx context.Context, runID string) context.Context {
	old, ok := ctx.Value(scopeKey{}).(*scope)
	if !ok || old.send == nil {
		return ctx
	}
	return context.WithValue(ctx, scopeKey{}, &scope{send: old.send, subagent: runID, thread: old.thread})
}

// WithThread returns a context whose RUN_STARTED and RUN_FINISHED events
// carry threadID, the conversation the run belongs to (AG-UI's threadId).
// Without it they carry their own run id. The sink and the attribution of
// ctx are kept.
func WithThread(ctx context.Context, threadID string) context.Context {
	sc := scope{thread: threadID}
	if old, ok := ctx.Value(scopeKey{}).(*scope); ok {
		sc.send, sc.subagent = old.send, old.subagent
	}
	return context.WithValue(ctx, scopeKey{}, &sc)
}

// ThreadID returns the thread set on ctx with WithThread, or "".
func ThreadID(ctx context.Context) string {
	if sc, ok := ctx.Value(scopeKey{}).(*scope); ok {
		return sc.thread
	}
	return ""
}

// SubagentRunID returns the sub-agent invocation ctx is attributed to, or "".
func SubagentRunID(ctx context.Context) string {
	if sc, ok := ctx.Value(scopeKey{}).(*scope); ok {
		return sc.subagent
	}
	return ""
}

// Emitter sends events to the sink of the context it was taken from (see
// From), attributed as that context says. Code that emits many events under
// one context, such as a run of an agent, takes its Emitter once. The zero
// Emitter drops every event. An Emitter is safe for concurrent use if its
// sink is.
type Emitter struct {
	sc *scope // nil when the context has no scope
}

// From returns the Emitter of ctx: its events go to the sink of ctx, with
// the attribution and thread of ctx. When ctx has no sink, the Emitter
// drops every event.
func From(ctx context.Context) Emitter {
	sc, _ := ctx.Value(scopeKey{}).(*scope)
	return Emitter{sc: sc}
}

// Enabled reports whether the events go anywhere. Code that must do work to
// build an event, such as encoding a result, checks it first.
func (em Emitter) Enabled() bool { return em.sc != nil && em.sc.send != nil }

// SubagentRunID returns the sub-agent invocation the events are attributed
// to, or "", as SubagentRunID does for the context em was taken from.
func (em Emitter) SubagentRunID() string {
	if em.sc == nil {
		return ""
	}
	return em.sc.subagent
}

// Emit sends e to the sink, if there is one.
//
// Emit attributes e to the sub-agent of the context em was taken from when
// e names none. Under a sub-agent, run-level events are dropped: the
// parent's stream has the SUBAGENT_* events in their place. RUN_STARTED and
// RUN_FINISHED without a ThreadID get the thread of the context, or their
// RunID. TEXT_MESSAGE_CONTENT and TOOL_CALL_ARGS with an empty Delta are
// dropped: they say nothing, and some AG-UI clients reject them.
func (em Emitter) Emit(e Event) {
	if sc := em.sc; sc != nil && sc.send != nil && sc.prepare(&e) {
		sc.send(e)
	}
}

// prepare attributes e as the scope says and reports whether it is to be
// sent. It takes e by pointer and leaves the sending to the caller, so that
// the large Event is copied once, straight into the sink's arguments.
func (sc *scope) prepare(e *Event) bool {
	// The cheap tests come first: most events are neither empty deltas nor
	// run-level, and comparing an int or a string's length is cheaper than
	// comparing types.
	if e.Delta == "" && (e.Type == TextMessageContent || e.Type == ToolCallArgs) {
		return false
	}
	if sc.subagent != "" {
		if e.Type.RunLevel() {
			return false
		}
		if e.SubagentRunID == "" {
			e.SubagentRunID = sc.subagent
		}
		// The calls of the sub-agent's own agent carry ids its model
		// chose, which another agent of the tree may have chosen too.
		e.ToolCallID = CallID(sc.subagent, e.ToolCallID)
		e.ParentToolCallID = CallID(sc.subagent, e.ParentToolCallID)
	} else if e.ThreadID == "" && (e.Type == RunStarted || e.Type == RunFinished) {
		e.ThreadID = sc.thread
		if e.ThreadID == "" {
			e.ThreadID = e.RunID
		}
	}
	return true
}

// CallID is the id that a tool call made by the agent of the sub-agent
// invocation subagentRunID carries in events (its TOOL_CALL_* events, and
// the parentToolCallId of the sub-agents it starts): the invocation's run
// id, "-", and the id the model gave the call. A model may give its calls
// the ids another agent of the tree gave its own (some number them from
// call_0 again in every reply); in one stream, a client tells every call
// apart. The top-level agent's calls (subagentRunID "") keep their ids, as
// does a call with none.
func CallID(subagentRunID, toolCallID string) string {
	if subagentRunID == "" || toolCallID == "" {
		return toolCallID
	}
	return subagentRunID + "-" + toolCallID
}

// sendOf returns the function that delivers events to s: the function
// itself for a SinkFunc, which spares each event the copy SinkFunc.Emit
// makes on its way to it, else s.Emit. It is nil when s is.
func sendOf(s Sink) func(Event) {
	switch s := s.(type) {
	case nil:
		return nil
	case SinkFunc:
		return s // nil for a nil SinkFunc
	}
	return s.Emit
}

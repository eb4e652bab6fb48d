// Package eventcheck checks that a stream of events is one a UI can render:
// the rules the official AG-UI client (@ag-ui/client 1.0.0) enforces, plus
// deputy's own (README of agui/clienttest, "Rules a conforming stream
// obeys"). Tests of every package that emits events use it, so that a Go
// test fails where the Node harness would.
package eventcheck

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/deputy-go/deputy/event"
)

// Options tune Check.
type Options struct {
	// HiddenLifecycle: the stream must carry no SUBAGENT_* event, and the
	// rules about them are skipped (attribution rules still apply).
	HiddenLifecycle bool
	// Partial: the stream may end without a terminal event (a run that was
	// cut short by its consumer).
	Partial bool
	// Background: a sub-agent may outlive its spawning tool call's result
	// (a background job, whose result is its receipt). It must still start
	// before that result.
	Background bool
	// Resumes is the stream of the run this one resumes (suspended for
	// answers): the resumed run does not announce again what the client
	// already has, so its tool results and sub-agents may name the tool
	// calls and sub-agents announced there.
	Resumes []event.Event
	// Resumed: the stream resumes runs whose streams are not at hand
	// (Resumes is not known): a tool result or a sub-agent may name a call
	// the stream never announced, as one announced before.
	Resumed bool
}

// required names the fields each type must carry in JSON.
var required = map[event.Type][]string{
	event.RunStarted:         {"threadId", "runId"},
	event.RunFinished:        {"threadId", "runId"},
	event.RunError:           {"message"},
	event.StepStarted:        {"stepName"},
	event.StepFinished:       {"stepName"},
	event.TextMessageStart:   {"messageId"},
	event.TextMessageContent: {"messageId", "delta"},
	event.TextMessageEnd:     {"messageId"},
	event.ToolCallStart:      {"toolCallId", "toolCallName"},
	event.ToolCallArgs:       {"toolCallId", "delta"},
	event.ToolCallEnd:        {"toolCallId"},
	event.ToolCallResult:     {"messageId", "toolCallId", "content"},
	event.SubagentStarted:    {"subagentRunId", "name"},
	event.SubagentFinished:   {"subagentRunId"},
	event.SubagentError:      {"subagentRunId", "message"},
	event.Custom:             {"name", "value"},
}

// allowed names the fields each type may carry in JSON, besides type and
// timestamp.
var allowed = map[event.Type][]string{
	event.RunStarted:         {"threadId", "runId", "parentRunId"},
	event.RunFinished:        {"threadId", "runId", "result", "outcome", "usage"},
	event.RunError:           {"message", "code"},
	event.StepStarted:        {"stepName", "subagentRunId"},
	event.StepFinished:       {"stepName", "subagentRunId"},
	event.TextMessageStart:   {"messageId", "role", "subagentRunId"},
	event.TextMessageContent: {"messageId", "delta", "subagentRunId"},
	event.TextMessageEnd:     {"messageId", "subagentRunId"},
	event.ToolCallStart:      {"toolCallId", "toolCallName", "parentMessageId", "subagentRunId"},
	event.ToolCallArgs:       {"toolCallId", "delta", "subagentRunId"},
	event.ToolCallEnd:        {"toolCallId", "subagentRunId"},
	event.ToolCallResult:     {"messageId", "toolCallId", "content", "role", "subagentRunId"},
	event.SubagentStarted:    {"subagentRunId", "name", "description", "parentSubagentRunId", "parentToolCallId", "parentMessageId", "metadata"},
	event.SubagentFinished:   {"subagentRunId", "result", "outcome", "metadata"},
	event.SubagentError:      {"subagentRunId", "message", "code", "metadata"},
	event.Custom:             {"name", "value", "subagentRunId"},
}

// Wire checks the JSON encoding of each event: the fields its type requires
// are there, no other field is, nothing is null, and roles are AG-UI's.
func Wire(events []event.Event) []string {
	var problems []string
	for i, e := range events {
		where := fmt.Sprintf("event %d (%s)", i, e.Type)
		b, err := json.Marshal(e)
		if err != nil {
			problems = append(problems, where+": "+err.Error())
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			problems = append(problems, where+": "+err.Error())
			continue
		}
		req, ok := required[e.Type]
		if !ok {
			problems = append(problems, where+": not a type deputy emits")
			continue
		}
		for _, k := range req {
			if _, ok := m[k]; !ok {
				problems = append(problems, fmt.Sprintf("%s: required field %q missing", where, k))
			}
		}
		for k, v := range m {
			if k != "type" && k != "timestamp" && !slices.Contains(allowed[e.Type], k) {
				problems = append(problems, fmt.Sprintf("%s: field %q is not part of %s", where, k, e.Type))
			}
			if string(v) == "null" {
				problems = append(problems, fmt.Sprintf("%s: field %q is null", where, k))
			}
		}
		if r, ok := m["role"]; ok {
			want := `"assistant"`
			if e.Type == event.ToolCallResult {
				want = `"tool"`
			}
			if string(r) != want {
				problems = append(problems, fmt.Sprintf("%s: role %s, want %s", where, r, want))
			}
		}
	}
	return problems
}

// Check checks the order and attribution of a whole response's events, and
// their wire form (Wire). It returns one line per problem; none means the
// stream conforms.
func Check(events []event.Event, opt Options) []string {
	problems := Wire(events)
	bad := func(i int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("event %d (%s): ", i, events[i].Type)+fmt.Sprintf(format, args...))
	}
	type owned struct {
		owner      string
		open, done bool
	}
	messages := map[string]*owned{}
	calls := map[string]*owned{}
	results := map[string]bool{}
	steps := map[string]string{} // open step name -> owner
	subs := map[string]*owned{}  // sub-agent -> open
	spawnedBy := map[string]string{}
	answered := map[string]bool{} // tool calls that have their result
	lifecycle := !opt.HiddenLifecycle
	started, ended := 0, false
	name := func(o string) string {
		if o == "" {
			return "the parent agent"
		}
		return fmt.Sprintf("sub-agent %q", o)
	}
	idTaken := func(id string) bool { return messages[id] != nil || results[id] || calls[id] != nil }
	// The calls the resumed runs announced may get their results here,
	// once, and spawn again; a sub-agent they suspended may start again.
	earlier := map[string]bool{} // sub-agents of the resumed runs
	for _, e := range opt.Resumes {
		switch e.Type {
		case event.ToolCallStart:
			calls[e.ToolCallID] = &owned{owner: e.SubagentRunID, done: true}
		case event.SubagentStarted:
			earlier[e.SubagentRunID] = true
			spawnedBy[e.ParentToolCallID] = e.SubagentRunID
		}
	}

	for i, e := range events {
		owner := e.SubagentRunID
		if i == 0 && e.Type != event.RunStarted {
			bad(i, "the first event must be RUN_STARTED")
		}
		if ended {
			bad(i, "event after the run ended")
		}
		isLifecycle := e.Type == event.SubagentStarted || e.Type == event.SubagentFinished || e.Type == event.SubagentError
		if !lifecycle && isLifecycle {
			bad(i, "SUBAGENT_* events must be hidden")
		}
		if lifecycle && owner != "" && e.Type != event.SubagentStarted {
			if s := subs[owner]; s == nil {
				bad(i, "attributed to sub-agent %q, which was never started", owner)
			} else if !s.open {
				bad(i, "attributed to sub-agent %q, which has already finished", owner)
			}
		}
		switch e.Type {
		case event.RunStarted:
			started++
			if started > 1 {
				bad(i, "a second RUN_STARTED")
			}
		case event.RunFinished, event.RunError:
			ended = true
			if e.Type == event.RunError {
				break
			}
			for id, m := range messages {
				if m.open {
					bad(i, "text message %q is still open", id)
				}
			}
			for id, c := range calls {
				if c.open {
					bad(i, "tool call %q is still open", id)
				}
			}
			for n := range steps {
				bad(i, "step %q is still open", n)
			}
			for id, s := range subs {
				if s.open {
					bad(i, "sub-agent %q is still open", id)
				}
			}
		case event.TextMessageStart:
			if idTaken(e.MessageID) {
				bad(i, "messageId %q is reused", e.MessageID)
			}
			messages[e.MessageID] = &owned{owner: owner, open: true}
		case event.TextMessageContent, event.TextMessageEnd:
			m := messages[e.MessageID]
			if m == nil || !m.open {
				bad(i, "text message %q is not open", e.MessageID)
				break
			}
			if m.owner != owner {
				bad(i, "attributed to %s but message %q belongs to %s", name(owner), e.MessageID, name(m.owner))
			}
			if e.Type == event.TextMessageContent && e.Delta == "" {
				bad(i, "empty delta")
			}
			if e.Type == event.TextMessageEnd {
				m.open = false
			}
		case event.ToolCallStart:
			if calls[e.ToolCallID] != nil {
				bad(i, "toolCallId %q is reused", e.ToolCallID)
			}
			if e.ParentMessageID != "" {
				if m := messages[e.ParentMessageID]; m == nil {
					bad(i, "parentMessageId %q names no earlier text message", e.ParentMessageID)
				} else if m.owner != owner {
					bad(i, "tool call of %s inside a message of %s", name(owner), name(m.owner))
				}
			}
			calls[e.ToolCallID] = &owned{owner: owner, open: true}
		case event.ToolCallArgs, event.ToolCallEnd:
			c := calls[e.ToolCallID]
			if c == nil || !c.open {
				bad(i, "tool call %q is not open", e.ToolCallID)
				break
			}
			if c.owner != owner {
				bad(i, "attributed to %s but tool call %q belongs to %s", name(owner), e.ToolCallID, name(c.owner))
			}
			if e.Type == event.ToolCallArgs && e.Delta == "" {
				bad(i, "empty delta")
			}
			if e.Type == event.ToolCallEnd {
				c.open, c.done = false, true
			}
		case event.ToolCallResult:
			if opt.Resumed && calls[e.ToolCallID] == nil {
				calls[e.ToolCallID] = &owned{owner: owner, done: true}
			}
			c := calls[e.ToolCallID]
			if c == nil || !c.done {
				bad(i, "result for tool call %q, which has not ended", e.ToolCallID)
			} else if c.owner != owner {
				bad(i, "result attributed to %s for a tool call of %s", name(owner), name(c.owner))
			}
			if idTaken(e.MessageID) {
				bad(i, "messageId %q is reused", e.MessageID)
			}
			results[e.MessageID] = true
			answered[e.ToolCallID] = true
			if child, ok := spawnedBy[e.ToolCallID]; ok && subs[child].open && !opt.Background {
				bad(i, "result for tool call %q while its sub-agent %q is still open", e.ToolCallID, child)
			}
		case event.StepStarted:
			if _, open := steps[e.StepName]; open {
				bad(i, "step %q is already open", e.StepName)
			}
			steps[e.StepName] = owner
		case event.StepFinished:
			o, open := steps[e.StepName]
			if !open {
				bad(i, "step %q is not open", e.StepName)
			} else if o != owner {
				bad(i, "step %q finished by %s, started by %s", e.StepName, name(owner), name(o))
			}
			delete(steps, e.StepName)
		case event.SubagentStarted:
			id, parent := e.SubagentRunID, e.ParentSubagentRunID
			if subs[id] != nil {
				bad(i, "subagentRunId %q is reused", id)
			}
			if earlier[id] {
				answered[e.ParentToolCallID] = false // the spawning call runs again
			}
			if parent != "" && (subs[parent] == nil || !subs[parent].open) {
				bad(i, "parentSubagentRunId %q is not an open sub-agent", parent)
			}
			if opt.Resumed && e.ParentToolCallID != "" && calls[e.ParentToolCallID] == nil {
				calls[e.ParentToolCallID] = &owned{owner: parent, done: true}
			}
			switch c := calls[e.ParentToolCallID]; {
			case e.ParentToolCallID == "":
				bad(i, "no parentToolCallId")
			case c == nil:
				bad(i, "parentToolCallId %q names no earlier TOOL_CALL_START", e.ParentToolCallID)
			case answered[e.ParentToolCallID]:
				bad(i, "sub-agent %q starts after its spawning tool call %q has its result", id, e.ParentToolCallID)
			default:
				if c.owner != parent {
					bad(i, "parentToolCallId %q belongs to %s, not to the spawning %s", e.ParentToolCallID, name(c.owner), name(parent))
				}
				if prev, ok := spawnedBy[e.ParentToolCallID]; ok && !(earlier[prev] && prev == id) {
					bad(i, "tool call %q already spawned sub-agent %q", e.ParentToolCallID, prev)
				}
				spawnedBy[e.ParentToolCallID] = id
			}
			subs[id] = &owned{open: true}
		case event.SubagentFinished, event.SubagentError:
			s := subs[e.SubagentRunID]
			if s == nil || !s.open {
				bad(i, "sub-agent %q is not open", e.SubagentRunID)
				break
			}
			s.open = false
		}
	}
	if !ended && !opt.Partial {
		problems = append(problems, "the stream ended without RUN_FINISHED or RUN_ERROR")
	}
	return problems
}

// Recorder is a Sink that keeps every event, for tests. It is safe for
// concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []event.Event
}

// Emit keeps e.
func (r *Recorder) Emit(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns the events kept so far, in order.
func (r *Recorder) Events() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// StartedRun returns the sub-agent run id of the first SUBAGENT_STARTED
// event for the sub-agent called name, or "" when there is none.
func StartedRun(events []event.Event, name string) string {
	for _, e := range events {
		if e.Type == event.SubagentStarted && e.Name == name {
			return e.SubagentRunID
		}
	}
	return ""
}

// Outcome returns the outcome of sub-agent run runID's SUBAGENT_FINISHED
// event, or "(no SUBAGENT_FINISHED)" when the run has none.
func Outcome(events []event.Event, runID string) string {
	for _, e := range events {
		if e.Type == event.SubagentFinished && e.SubagentRunID == runID {
			return string(e.Outcome)
		}
	}
	return "(no SUBAGENT_FINISHED)"
}

package agent

import (
	"fmt"
	"slices"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/provider"
)

// emitCall announces a whole tool call, arguments and all, under the
// message parent ("" for none).
func emitCall(em event.Emitter, c *provider.ToolCall, parent string) {
	em.Emit(event.Event{Type: event.ToolCallStart, ToolCallID: c.ID, ToolCallName: c.Name, ParentMessageID: parent})
	em.Emit(event.Event{Type: event.ToolCallArgs, ToolCallID: c.ID, Delta: string(c.Arguments)})
	em.Emit(event.Event{Type: event.ToolCallEnd, ToolCallID: c.ID})
}

// withIDs returns calls with an id on each call that has none, repeats an
// earlier call's, or names a call of the run's conversation (taken, with
// its messages msgs; nil for none: a model may number its calls from
// call_0 in every reply, and a client of the run's events must tell each
// call apart, as the run's model must each result), so that every result
// can name its call. It copies calls before changing them: the slice
// belongs to the provider.
func withIDs(calls []provider.ToolCall, taken *callIDs, msgs []provider.Message) []provider.ToolCall {
	// A reply of many calls keeps their ids in a set: scanning the calls
	// before each one grows with the square of their number, and was a
	// twentieth of the CPU of the turn of 1,024 calls in
	// BenchmarkFanoutDefault.
	var seen map[string]bool
	if len(calls) > 16 {
		seen = make(map[string]bool, len(calls))
	}
	copied := false
	for i := range calls {
		c := calls[i].ID
		repeated := false
		if seen != nil {
			repeated = seen[c]
		} else {
			repeated = hasID(calls[:i], c)
		}
		if c != "" && !repeated && !taken.has(c, msgs) {
			if seen != nil {
				seen[c] = true
			}
			continue
		}
		if !copied {
			calls = slices.Clone(calls)
			copied = true
		}
		calls[i].ID = id.New("call_")
		if seen != nil {
			seen[calls[i].ID] = true
		}
	}
	return calls
}

// callIDs are the ids of the tool calls of a run's conversation: those
// its messages hold, and those compaction folded away. A set of them is
// made only once the conversation holds many calls (scanning them for
// each call of a reply would grow with the square of their number) or is
// compacted: a run of a few calls allocates nothing for it.
type callIDs struct {
	set map[string]bool // nil: the ids are those of the run's messages
}

// manyCalls is how many messages, or calls, a run's conversation holds
// before its calls' ids are kept in a set: a reply of many calls after
// another (fan-out) would otherwise scan all the earlier one's for each.
const manyCalls = 64

// has reports whether id names a call of the conversation, whose
// messages are msgs (c nil: none).
func (c *callIDs) has(id string, msgs []provider.Message) bool {
	switch {
	case c == nil:
		return false
	case c.set == nil && len(msgs) <= manyCalls && callsIn(msgs) <= manyCalls:
		for _, m := range msgs {
			if hasID(m.ToolCalls, id) {
				return true
			}
		}
		return false
	}
	c.keep(msgs)
	return c.set[id]
}

// callsIn returns how many tool calls msgs hold.
func callsIn(msgs []provider.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.ToolCalls)
	}
	return n
}

// keep makes the set, from the conversation's messages msgs, before they
// change other than by growing (compaction).
func (c *callIDs) keep(msgs []provider.Message) {
	if c.set != nil {
		return
	}
	c.set = map[string]bool{}
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			c.set[tc.ID] = true
		}
	}
}

// add adds the ids of calls, a reply's, to the set once it is made.
func (c *callIDs) add(calls []provider.ToolCall) {
	if c.set == nil {
		return // the run's messages will hold them
	}
	for _, tc := range calls {
		c.set[tc.ID] = true
	}
}

func hasID(calls []provider.ToolCall, id string) bool {
	for _, c := range calls {
		if c.ID == id {
			return true
		}
	}
	return false
}

// streamReply consumes a streamed reply, emitting text and tool-call
// events as the pieces arrive. Whatever way the reply ends, it closes the
// message and tool call it opened.
type streamReply struct {
	em       event.Emitter // of the run
	msgID    string
	textOpen bool
	textSent bool
	openCall string   // id of the tool call whose events are open
	ids      []string // the id of each tool call, by index
	// seen holds ids once the reply has many calls (used).
	seen map[string]bool
	// taken are the ids of the calls of the run's conversation, whose
	// messages are msgs: a copy of the run's, which holds no pointer
	// into the run (the run's state stays on its goroutine's stack).
	taken callIDs
	msgs  []provider.Message
}

// finish returns the calls of the streamed response with the ids their
// events announced, and announces any call the stream left out, as the
// plain path does. It copies calls before changing them: the slice belongs
// to the provider.
func (sr *streamReply) finish(calls []provider.ToolCall) []provider.ToolCall {
	cloned := false
	setID := func(i int, id string) {
		if !cloned {
			calls, cloned = slices.Clone(calls), true
		}
		calls[i].ID = id
	}
	for i := range calls {
		if i < len(sr.ids) && sr.ids[i] != "" {
			if calls[i].ID != sr.ids[i] {
				setID(i, sr.ids[i])
			}
			continue
		}
		// Left out of the stream: an id as on the plain path (see withIDs),
		// and the whole call announced now.
		if c := calls[i].ID; c == "" || hasID(calls[:i], c) || sr.used(c) || sr.taken.has(c, sr.msgs) {
			setID(i, id.New("call_"))
		}
		sr.closeText()
		sr.closeCall()
		emitCall(sr.em, &calls[i], sr.parent())
	}
	return calls
}

// delta handles one piece of the stream; an error stops it.
func (sr *streamReply) delta(d provider.Delta) error {
	em := sr.em
	if d.Text != "" {
		sr.closeCall()
		if !sr.textOpen {
			em.Emit(event.Event{Type: event.TextMessageStart, MessageID: sr.msgID, Role: "assistant"})
			sr.textOpen, sr.textSent = true, true
		}
		em.Emit(event.Event{Type: event.TextMessageContent, MessageID: sr.msgID, Delta: d.Text})
	}
	if !d.HasToolCall() {
		return nil
	}
	tc := &d.ToolCall
	sr.closeText()
	if tc.Index < 0 {
		return fmt.Errorf("tool call index %d: the provider's Stream broke its contract", tc.Index)
	}
	for len(sr.ids) <= tc.Index {
		sr.ids = append(sr.ids, "")
	}
	callID := sr.ids[tc.Index]
	if callID == "" {
		callID = tc.ID
		if callID == "" || sr.used(callID) || sr.taken.has(callID, sr.msgs) {
			callID = id.New("call_") // every result must name one call
		}
		sr.ids[tc.Index] = callID
		if sr.seen != nil {
			sr.seen[callID] = true
		}
		sr.closeCall()
		em.Emit(event.Event{Type: event.ToolCallStart, ToolCallID: callID, ToolCallName: tc.Name, ParentMessageID: sr.parent()})
		sr.openCall = callID
	}
	if sr.openCall == callID {
		em.Emit(event.Event{Type: event.ToolCallArgs, ToolCallID: callID, Delta: tc.Arguments})
	}
	return nil
}

// used reports whether id is that of a call the stream announced. A reply
// of many calls keeps their ids in a set, as withIDs does: scanning them
// for each new call grows with the square of their number.
func (sr *streamReply) used(id string) bool {
	if sr.seen == nil {
		if len(sr.ids) <= 16 {
			return slices.Contains(sr.ids, id)
		}
		sr.seen = make(map[string]bool, len(sr.ids))
		for _, c := range sr.ids {
			if c != "" {
				sr.seen[c] = true
			}
		}
	}
	return sr.seen[id]
}

// parent is the message a tool call names as its parent: the reply's text,
// only when some of it was sent.
func (sr *streamReply) parent() string {
	if sr.textSent {
		return sr.msgID
	}
	return ""
}

func (sr *streamReply) closeText() {
	if sr.textOpen {
		sr.em.Emit(event.Event{Type: event.TextMessageEnd, MessageID: sr.msgID})
		sr.textOpen = false
	}
}

func (sr *streamReply) closeCall() {
	if sr.openCall != "" {
		sr.em.Emit(event.Event{Type: event.ToolCallEnd, ToolCallID: sr.openCall})
		sr.openCall = ""
	}
}

func (sr *streamReply) closeAll() {
	sr.closeText()
	sr.closeCall()
}

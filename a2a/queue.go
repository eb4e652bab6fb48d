package a2a

import (
	"strings"
	"sync"

	"github.com/deputy-go/deputy/event"
)

// maxQueued bounds the events a served run may have waiting to be sent:
// past it, the oldest status events are dropped (the answer's text never
// is). A client, or a store, slower than the run holds it back no further.
const maxQueued = 4096

// queue carries a served run's events from its goroutines (it is their
// Sink) to the goroutine that sends them. The top-level answer's text
// arrives in deltas and leaves in one chunk per turn of the sender, so
// a slow sender makes fewer, larger updates rather than a longer backlog.
type queue struct {
	mu      sync.Mutex
	events  []event.Event
	text    strings.Builder
	closed  bool
	dropped int
	ready   chan struct{} // signalled when something arrives or the queue closes
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

// forwarded reports whether an A2A client is sent e: the top-level
// answer's text, sub-agents starting and ending, and tool calls starting
// and ending.
func forwarded(e event.Event) bool {
	switch e.Type {
	case event.TextMessageContent:
		return e.SubagentRunID == ""
	case event.SubagentStarted, event.SubagentFinished, event.SubagentError, event.ToolCallStart, event.ToolCallResult:
		return true
	}
	return false
}

// Emit implements event.Sink.
func (q *queue) Emit(e event.Event) {
	if !forwarded(e) {
		return
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	if e.Type == event.TextMessageContent {
		q.text.WriteString(e.Delta)
	} else {
		if len(q.events) >= maxQueued {
			q.events = q.events[1:]
			q.dropped++
		}
		q.events = append(q.events, e)
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// next waits for what arrived since the last call and returns it; ok is
// false once the queue is closed and empty.
func (q *queue) next() (events []event.Event, text string, ok bool) {
	for {
		q.mu.Lock()
		events, text = q.events, q.text.String()
		q.events = nil
		q.text.Reset()
		closed := q.closed
		q.mu.Unlock()
		if len(events) > 0 || text != "" {
			return events, text, true
		}
		if closed {
			return nil, "", false
		}
		<-q.ready
	}
}

package subagent

import (
	"context"
	"testing"
	"time"

	"github.com/deputy-go/deputy/event"
)

// The spawning call's flush waits for the sink to take its job's
// announcement, not the events the job's child queued after it: a sink
// that, taking the child's first piece of text, waits for what the
// call's receipt leads to (the parent's next tool) held the call, and so
// the parent, for ever, whenever the child had queued that text before
// the call flushed and the relay's goroutine had not begun passing it on.
func TestRelayFlushLeavesTheJobsOwnEvents(t *testing.T) {
	release := make(chan struct{})
	r := &relay{}
	em := event.From(event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		if e.Type == event.TextMessageContent {
			<-release // the sink waits for the parent's next step
		}
	})))
	o := r.attach(em, 1)
	job := r.sink("sub_1")
	job.Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_1"})
	announced := r.mark()
	job.Emit(event.Event{Type: event.TextMessageContent, Delta: "x", SubagentRunID: "sub_1"})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		r.flush(announced, nil)
	}()
	// The relay's goroutine starts once flush waits: it has begun passing
	// on none of the events.
	for waiting := false; !waiting; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		waiting = o.moved != nil
		r.mu.Unlock()
	}
	r.start(o)
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Error("flush waited for the job's text, which the sink takes only once the call has returned")
	}
	close(release)
	<-flushed
	r.detach(o, nil)
}

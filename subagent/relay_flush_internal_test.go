package subagent

import (
	"context"
	"slices"
	"sync"
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
		r.flush(announced, announceGrace, nil)
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

// The spawning call's flush waits for the Emit of its job's announcement
// that the relay's goroutine has begun, where it returned at once, as if
// the call were within that Emit: the call went on to emit its receipt,
// which could reach the sink before the job's SUBAGENT_STARTED, a stream
// a client refuses. A call that is within the Emit of an event queued
// before its job's announcement still does not wait for it.
func TestRelayFlushWaitsForTheAnnouncementUnderWay(t *testing.T) {
	t.Run("announcement under way", func(t *testing.T) {
		inEmit, release := make(chan struct{}), make(chan struct{})
		r := &relay{}
		em := event.From(event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
			if e.Type == event.SubagentStarted {
				close(inEmit)
				<-release // a sink slow to take it
			}
		})))
		o := r.attach(em, 1)
		pre := r.mark()
		r.sink("sub_1").Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_1"})
		announced := r.markAfter(pre)
		r.start(o)
		<-inEmit
		flushed := make(chan struct{})
		go func() {
			defer close(flushed)
			r.flush(announced, announceGrace, nil)
		}()
		select {
		case <-flushed:
			t.Error("flush returned while the sink was still taking the job's SUBAGENT_STARTED")
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		select {
		case <-flushed:
		case <-time.After(10 * time.Second):
			t.Error("flush did not return once the sink took the announcement")
		}
		r.detach(o, nil)
	})
	t.Run("call within an earlier Emit", func(t *testing.T) {
		r := &relay{}
		done := make(chan struct{})
		em := event.From(event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
			if e.Type != event.TextMessageContent {
				return
			}
			// The sink starts a job as it takes an earlier event.
			defer close(done)
			pre := r.mark()
			r.sink("sub_2").Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_2"})
			r.flush(r.markAfter(pre), 0, nil)
		})))
		o := r.attach(em, 1)
		r.sink("sub_1").Emit(event.Event{Type: event.TextMessageContent, Delta: "x", SubagentRunID: "sub_1"})
		r.start(o)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a flush from within the sink's Emit waited for that Emit")
		}
		r.detach(o, nil)
	})
}

// Two jobs spawned in one step: as the second call flushes, the sink is
// still taking the first job's announcement, an event queued before the
// second's. The call waited for none of it and emitted its receipt,
// which reached the sink before its job's SUBAGENT_STARTED (a stream an
// AG-UI client refuses). It waits now, for a grace at most: a sink that
// waits within that Emit for what the call does next is let go.
func TestRelayFlushWaitsForAnotherJobsAnnouncement(t *testing.T) {
	// run flushes the second job's announcement with grace while the sink
	// holds the first's until release is closed; let closes it, once.
	run := func(t *testing.T, grace time.Duration, release <-chan struct{}, let func()) (returned time.Duration, taken []string) {
		inEmit := make(chan struct{})
		var got []string
		r := &relay{}
		em := event.From(event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
			if e.SubagentRunID == "sub_1" {
				close(inEmit)
				<-release
			}
			r.mu.Lock()
			got = append(got, e.SubagentRunID)
			r.mu.Unlock()
		})))
		o := r.attach(em, 1)
		r.sink("sub_1").Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_1"})
		pre := r.mark()
		r.sink("sub_2").Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub_2"})
		announced := r.markAfter(pre)
		r.start(o)
		<-inEmit
		start := time.Now()
		r.flush(announced, grace, nil)
		returned = time.Since(start)
		r.mu.Lock()
		taken = append(taken, got...)
		r.mu.Unlock()
		let()
		r.detach(o, nil)
		return returned, taken
	}
	t.Run("slow sink", func(t *testing.T) {
		release, let := letOnce()
		time.AfterFunc(50*time.Millisecond, let)
		took, taken := run(t, time.Minute, release, let)
		if !slices.Equal(taken, []string{"sub_1", "sub_2"}) {
			t.Errorf("flush returned after %v with the sink having taken %q, want both announcements", took, taken)
		}
	})
	t.Run("sink waiting on the caller", func(t *testing.T) {
		release, let := letOnce()
		took, taken := run(t, 20*time.Millisecond, release, let)
		if len(taken) != 0 || took > 10*time.Second {
			t.Errorf("flush returned after %v with %q taken, want it let go after its grace", took, taken)
		}
	})
}

// letOnce returns a channel and a function that closes it, safe to call
// more than once.
func letOnce() (<-chan struct{}, func()) {
	c := make(chan struct{})
	var once sync.Once
	return c, func() { once.Do(func() { close(c) }) }
}

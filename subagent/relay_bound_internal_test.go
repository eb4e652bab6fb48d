package subagent

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/event"
)

// A sink slow to take an event slows down the sub-agents of the jobs,
// the queue held to maxRelayed, and does not hold up a job cancelled,
// nor the events that announce, end or tell of a job.
func TestRelayQueueBoundedBySlowSink(t *testing.T) {
	r := &relay{}
	release := make(chan struct{})
	var mu sync.Mutex
	var got []event.Event
	em := event.From(event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		if e.Delta == "first" {
			<-release
		}
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	})))
	o := r.attach(em, 1)
	r.start(o)
	queued := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(o.queue)
	}
	var wg sync.WaitGroup
	wg.Go(func() { // passes on its event, and is held there
		r.emit("sub_a", nil, event.Event{Type: event.TextMessageContent, Delta: "first", SubagentRunID: "sub_a"})
	})
	for !func() bool { r.mu.Lock(); defer r.mu.Unlock(); return o.in }() {
		time.Sleep(time.Millisecond)
	}
	const n = 3 * maxRelayed
	most, finished := 0, make(chan struct{})
	wg.Go(func() { // a chatty job
		defer close(finished)
		for i := 1; i <= n; i++ {
			r.emit("sub_b", nil, event.Event{Type: event.TextMessageContent, Delta: strconv.Itoa(i), SubagentRunID: "sub_b"})
			most = max(most, queued())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for queued() < maxRelayed && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-finished:
		t.Errorf("a job emitted all its %d events while the sink was held on one: the queue grew to %d", n, most)
	case <-time.After(50 * time.Millisecond):
	}
	// Not held up: the events that tell of a job, and a job cancelled.
	cancelled := make(chan struct{})
	close(cancelled)
	through := make(chan struct{})
	go func() {
		defer close(through)
		r.emit("sub_b", nil, event.Event{Type: event.Custom, Name: JobMessageEvent, Delta: "own"})
		r.emit("sub_c", cancelled, event.Event{Type: event.TextMessageContent, Delta: "cancelled", SubagentRunID: "sub_c"})
	}()
	select {
	case <-through:
	case <-time.After(10 * time.Second):
		t.Error("an event of a job's parent, or of a job cancelled, waited for a slow sink")
	}
	if q := queued(); q > maxRelayed+2 {
		t.Errorf("%d events queued, want at most %d", q, maxRelayed+2)
	}
	close(release)
	<-through
	wg.Wait()
	r.detach(o, nil)
	if most > maxRelayed+2 {
		t.Errorf("the queue grew to %d events, want at most %d", most, maxRelayed+2)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := n + 3; len(got) != want {
		t.Fatalf("the sink took %d events, want %d", len(got), want)
	}
	next := 1
	for _, e := range got {
		if e.SubagentRunID == "sub_b" {
			if e.Delta != strconv.Itoa(next) {
				t.Fatalf("sub_b: %s, want %d", e.Delta, next)
			}
			next++
		}
	}
}

// A wait begun while the sink takes one event lifts the bound for the
// jobs it waits for until that Emit returns, and its end, within a later
// Emit, changes nothing.
func TestRelayLiftEndsWithItsEmit(t *testing.T) {
	r := &relay{}
	var release func()
	lifted, took := -1, make(chan struct{})
	em := event.From(event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		switch e.Delta {
		case "a":
			release = r.lift([]string{"sub_x"})
			r.mu.Lock()
			lifted = r.out.waitedFor("sub_x")
			r.mu.Unlock()
		case "b":
			release() // the wait ends within a later Emit
			close(took)
		}
	})))
	o := r.attach(em, 1)
	r.start(o)
	r.emit("sub_x", nil, event.Event{Type: event.TextMessageContent, Delta: "a", SubagentRunID: "sub_x"})
	r.emit("sub_x", nil, event.Event{Type: event.TextMessageContent, Delta: "b", SubagentRunID: "sub_x"})
	<-took
	r.detach(o, nil)
	if lifted != 1 {
		t.Errorf("within the Emit that began the wait, the job was lifted %d times, want 1", lifted)
	}
	if n := o.waitedFor("sub_x"); n != 0 {
		t.Errorf("after it, %d, want 0", n)
	}
}

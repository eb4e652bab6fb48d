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
	r.attach(em, 1)
	queued := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.queue)
	}
	var wg sync.WaitGroup
	wg.Go(func() { // passes on its event, and is held there
		r.emit("sub_a", nil, event.Event{Type: event.TextMessageContent, Delta: "first", SubagentRunID: "sub_a"})
	})
	for !func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.passing }() {
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
	r.detach(1)
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

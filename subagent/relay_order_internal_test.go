package subagent

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/event"
)

// Many jobs emitting at once, and a sink emitting again from within Emit,
// each emitter's events reach the sink in order, none lost; none after
// the run's end.
func TestRelayOrderManyEmitters(t *testing.T) {
	var mu sync.Mutex
	last := map[string]int{}
	count, reSeq := 0, 0
	r := &relay{}
	em := event.From(event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		n, _ := strconv.Atoi(e.Delta)
		who := e.SubagentRunID
		if e.Type == event.Custom {
			who = "re"
		}
		mu.Lock()
		if n != last[who]+1 {
			t.Errorf("%s: %d after %d", who, n, last[who])
		}
		last[who] = n
		count++
		mu.Unlock()
		if n%100 == 0 && who != "re" { // re-enters, as a sink acting on a job: an event of the job's parent
			mu.Lock()
			reSeq++
			k := reSeq
			mu.Unlock()
			r.emit("re", nil, event.Event{Type: event.Custom, Name: JobMessageEvent, Delta: strconv.Itoa(k)})
		}
	})))
	o := r.attach(em, 1)
	r.start(o)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			id := "sub_" + strconv.Itoa(g)
			for i := 1; i <= 2000; i++ {
				r.emit(id, nil, event.Event{Type: event.TextMessageContent, Delta: strconv.Itoa(i), SubagentRunID: id})
			}
		})
	}
	wg.Wait()
	const want = 16*2000 + 16*20
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		n := count
		mu.Unlock()
		if n >= want {
			break
		}
	}
	r.detach(o, nil)
	r.emit("late", nil, event.Event{Type: event.TextMessageContent, Delta: "1", SubagentRunID: "late"})
	mu.Lock()
	defer mu.Unlock()
	if count != want {
		t.Errorf("the sink took %d events, want %d", count, want)
	}
}

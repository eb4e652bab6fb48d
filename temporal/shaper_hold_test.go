package temporal

import (
	"context"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/event"
)

// What a turn's stream holds before it is told of its thread's jobs is
// bounded: past maxHeld events only those that open or end a sub-agent,
// or tell of a job (deputy.job_*), are kept, not the CUSTOM events any
// tool of the tree may emit without end; once released, all are handed
// on, those of a job read as ended left out.
func TestShaperHoldIsBounded(t *testing.T) {
	var rec recorder
	sh := &shaper{em: event.From(event.WithSink(context.Background(), &rec)), steps: map[string]bool{}, subs: map[string]event.Event{}}
	sh.hold()
	for range maxHeld + 500 {
		sh.Emit(event.Event{Type: event.Custom, Name: "progress", Value: []byte(`{}`)})
	}
	sh.Emit(event.Event{Type: event.Custom, Name: "deputy.job_ended", Value: []byte(`{"subagent_run_id":"t/job_1"}`)})
	sh.Emit(event.Event{Type: event.Custom, Name: "deputy.job_ended", Value: []byte(`{"subagent_run_id":"t/job_2"}`)})
	sh.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: "t/job_1"})
	sh.mu.Lock()
	held := len(sh.held)
	sh.mu.Unlock()
	if held != maxHeld+3 {
		t.Errorf("the shaper holds %d events, want %d: the first %d and the job's three", held, maxHeld+3, maxHeld)
	}
	sh.release(nil, []string{"t/job_2"})
	sh.Emit(event.Event{Type: event.Custom, Name: "progress", Value: []byte(`{}`)})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var jobs []string
	for _, e := range rec.events {
		if strings.HasPrefix(e.Name, "deputy.job_") || e.Type == event.SubagentFinished {
			jobs = append(jobs, string(e.Type)+" "+string(e.Value))
		}
	}
	if len(rec.events) != maxHeld+3 || len(jobs) != 2 {
		t.Errorf("released %d events, of jobs %q; want %d, job_1's two", len(rec.events), jobs, maxHeld+3)
	}
}

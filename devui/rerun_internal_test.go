package devui

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/event"
)

// Events emitted from other goroutines while a re-run's terminal event
// is written, as a job that outlives the run emits from its own, never
// follow the terminal event: not on the wire, not in what is recorded;
// and once the re-run is recorded nothing more is written, since the
// handler is about to return and its ResponseWriter with it.
func TestNothingFollowsTheReRunsTerminalEvent(t *testing.T) {
	for _, terminal := range []event.Event{
		{Type: event.RunFinished, RunID: "r"},
		{Type: event.RunError, Message: "failed"},
	} {
		for range 200 {
			rec := httptest.NewRecorder()
			f := &frames{w: rec, rc: http.NewResponseController(rec)}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
							f.Emit(event.Event{Type: event.StepStarted, StepName: "job"})
						}
					}
				})
			}
			f.Emit(terminal)
			events, _ := f.end()
			close(stop)
			wg.Wait()
			frames := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n\n"), "\n\n")
			if last := frames[len(frames)-1]; !strings.Contains(last, `"`+string(terminal.Type)+`"`) {
				t.Fatalf("the stream ends with %q, after its %s", last, terminal.Type)
			}
			var e event.Event
			if err := json.Unmarshal(events[len(events)-1], &e); err != nil || e.Type != terminal.Type {
				t.Fatalf("the recorded events end with %s (%v), after the %s", events[len(events)-1], err, terminal.Type)
			}
		}
	}
	// Ended before any terminal event (a re-run that failed before its
	// lead ran): what comes after is neither written nor recorded.
	rec := httptest.NewRecorder()
	f := &frames{w: rec, rc: http.NewResponseController(rec)}
	f.Emit(event.Event{Type: event.StepStarted, StepName: "lead"})
	f.end()
	f.Emit(event.Event{Type: event.StepStarted, StepName: "job"})
	if events, _ := f.end(); len(events) != 1 || strings.Contains(rec.Body.String(), `"job"`) {
		t.Errorf("after the re-run ended the stream reads %q and %d events are recorded, want only the one before", rec.Body.String(), len(events))
	}
}

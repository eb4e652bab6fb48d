package agui

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/event"
)

// Events emitted from other goroutines while the run's terminal event is
// written, as a background job that outlives its turn emits, never follow
// the terminal event on the wire.
func TestNothingFollowsTheTerminalEvent(t *testing.T) {
	for range 200 {
		rec := httptest.NewRecorder()
		st := newStream(rec, false, 0, func() {}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		st.open()
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						st.Emit(event.Event{Type: event.StepStarted, StepName: "job"})
					}
				}
			})
		}
		st.finish(event.Event{Type: event.RunFinished, RunID: "r"})
		close(stop)
		wg.Wait()
		frames := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n\n"), "\n\n")
		if last := frames[len(frames)-1]; !strings.Contains(last, `"RUN_FINISHED"`) {
			t.Fatalf("the stream ends with %q, after its RUN_FINISHED", last)
		}
	}
}

package agui

import (
	"context"
	"errors"
	"sync"
)

// errStopped is the cause of a run's context when Handler.Stop ends it.
var errStopped = errors.New("agui: the run was stopped by the server (Handler.Stop)")

// activeRuns are the runs a handler is serving, by thread, for Stop.
type activeRuns struct {
	mu   sync.Mutex
	runs map[string]map[*activeRun]struct{}
}

type activeRun struct{ stop context.CancelCauseFunc }

// add records a run on thread, stopped by stop, and returns the function
// that forgets it.
func (a *activeRuns) add(thread string, stop context.CancelCauseFunc) (remove func()) {
	r := &activeRun{stop: stop}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runs == nil {
		a.runs = map[string]map[*activeRun]struct{}{}
	}
	if a.runs[thread] == nil {
		a.runs[thread] = map[*activeRun]struct{}{}
	}
	a.runs[thread][r] = struct{}{}
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.runs[thread], r)
		if len(a.runs[thread]) == 0 {
			delete(a.runs, thread)
		}
	}
}

// Stop stops the runs this handler is serving on the thread threadID, as
// whoever runs the agent may (a stop button of the application's own API,
// an operator): each run's context is cancelled, and its response ends
// with RUN_FINISHED whose outcome is "cancelled" (AG-UI 1.0), with the
// usage spent so far. Nothing of a stopped run is stored; on a stored
// thread (WithThreads) a suspended run it was resuming is forgotten with
// its interrupts, since AG-UI makes the next run after a cancelled one an
// ordinary new run. A run that had already finished, or was ending with
// interrupts, ends as it would have. Stop reports whether it found a run
// to stop; it sees the runs of this process only.
//
// A client stops a run by closing its request (@ag-ui/client's abortRun):
// the handler then cancels the run and sends nothing, the client being
// gone, and a suspended run it was resuming stays suspended, since that
// client still holds the interrupts and may answer them again.
func (h *Handler) Stop(threadID string) bool {
	h.active.mu.Lock()
	defer h.active.mu.Unlock()
	for r := range h.active.runs[threadID] {
		r.stop(errStopped)
	}
	return len(h.active.runs[threadID]) > 0
}

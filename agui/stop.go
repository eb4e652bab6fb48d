package agui

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// errStopped is the cause of a run's context when Handler.Stop ends it,
// and errShutdown when Handler.Shutdown does.
var (
	errStopped  = errors.New("agui: the run was stopped by the server (Handler.Stop)")
	errShutdown = errors.New("agui: the run was stopped by the server's shutdown (Handler.Shutdown)")
)

// stoppedBy reports whether the server stopped the run of ctx.
func stoppedBy(ctx context.Context) bool {
	c := context.Cause(ctx)
	return c == errStopped || c == errShutdown
}

// activeRuns are the requests a handler is serving, and their runs by
// thread, for Stop and Shutdown.
type activeRuns struct {
	mu       sync.Mutex
	runs     map[thread]map[*activeRun]struct{}
	serving  int           // requests entered and not yet left
	shutdown bool          // Shutdown was called: no new requests
	idle     chan struct{} // closed when shutdown and serving is 0
}

type activeRun struct{ stop context.CancelCauseFunc }

// enter counts a request in, or reports false once Shutdown was called.
func (a *activeRuns) enter() (leave func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.shutdown {
		return nil, false
	}
	a.serving++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.serving--
		if a.shutdown && a.serving == 0 {
			close(a.idle)
		}
	}, true
}

// add records a run on th, stopped by stop, and returns the function that
// forgets it. A run added after Shutdown began is stopped at once.
func (a *activeRuns) add(th thread, stop context.CancelCauseFunc) (remove func()) {
	r := &activeRun{stop: stop}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.shutdown {
		stop(errShutdown)
	}
	if a.runs == nil {
		a.runs = map[thread]map[*activeRun]struct{}{}
	}
	if a.runs[th] == nil {
		a.runs[th] = map[*activeRun]struct{}{}
	}
	a.runs[th][r] = struct{}{}
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.runs[th], r)
		if len(a.runs[th]) == 0 {
			delete(a.runs, th)
		}
	}
}

// Stop stops the runs this handler is serving on the thread threadID of
// owner ("" without WithAuthorize), as whoever runs the agent may (a stop
// button of the application's own API, an operator): each run's context
// is cancelled, and its response ends with RUN_FINISHED whose outcome is
// "cancelled" (AG-UI 1.0), with the usage spent so far. Nothing of a
// stopped run is stored; on a stored thread (WithThreads) a suspended run
// it was resuming is forgotten with its interrupts, since AG-UI makes the
// next run after a cancelled one an ordinary new run. A run that had
// already finished, or was ending with interrupts, ends as it would have.
// Stop reports whether it found a run to stop; it sees the runs of this
// process only.
//
// A client stops a run by closing its request (@ag-ui/client's abortRun):
// the handler then cancels the run and sends nothing, the client being
// gone, and a suspended run it was resuming stays suspended, since that
// client still holds the interrupts and may answer them again.
func (h *Handler) Stop(owner, threadID string) bool {
	h.active.mu.Lock()
	defer h.active.mu.Unlock()
	runs := h.active.runs[thread{owner, threadID}]
	for r := range runs {
		r.stop(errStopped)
	}
	return len(runs) > 0
}

// Shutdown stops the handler gracefully: it refuses new requests (503,
// with a body that says to retry), stops every run in progress as Stop
// does (each ends with the outcome "cancelled" and its usage so far, and
// nothing of it is stored), and waits until every request has ended, or
// until ctx ends, when it returns ctx's error. Call it when the server
// shuts down, beside http.Server.Shutdown, which waits for responses to
// end but does not end them:
//
//	srv.RegisterOnShutdown(func() { h.Shutdown(ctx) })
//	err := srv.Shutdown(ctx)
//
// After Shutdown the handler refuses every run; build a new one to serve
// again.
func (h *Handler) Shutdown(ctx context.Context) error {
	a := &h.active
	a.mu.Lock()
	if !a.shutdown {
		a.shutdown = true
		a.idle = make(chan struct{})
		if a.serving == 0 {
			close(a.idle)
		}
	}
	for _, runs := range a.runs {
		for r := range runs {
			r.stop(errShutdown)
		}
	}
	idle := a.idle
	a.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("agui: shutdown: %w while runs were still ending", ctx.Err())
	}
}

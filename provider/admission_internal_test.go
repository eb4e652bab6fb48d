package provider

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestAdmissionWakesAFirstWhosePauseEndsAsItQueues is a call that finds
// the model paused for a moment, and the moment over by the time it has
// joined the queue: nothing is in flight and no one else waits, so no
// call's end and no other waiter would wake it; it must go at once (or
// set its timer), not wait for ever.
func TestAdmissionWakesAFirstWhosePauseEndsAsItQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := NewAdmission()
		if err != nil {
			t.Fatal(err)
		}
		g := a.gate("m")
		// The model is paused for a millisecond after a 429. The gate's
		// clock reads that moment at its first look and, like a real
		// clock on a busy machine, past the pause at every look after.
		start := time.Now()
		g.paused = start.Add(time.Millisecond)
		looks := 0
		g.now = func() time.Time {
			looks++
			if looks == 1 {
				return time.Now()
			}
			return time.Now().Add(time.Second)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		tk, _, err := g.acquire(ctx, "m", 0)
		if err != nil {
			t.Fatalf("the call waited %v with nothing in flight and no one ahead, then: %v", time.Since(start), err)
		}
		g.release(tk, &Response{}, nil, outcomeSuccess)
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.inflight != 0 || g.head != nil || g.queued != 0 {
			t.Errorf("after the call: %d in flight, %d queued, want none", g.inflight, g.queued)
		}
	})
}

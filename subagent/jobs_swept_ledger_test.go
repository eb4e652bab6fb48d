package subagent_test

import (
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// A job that spends during the turn that started it, then is swept while
// its process holds its thread, is counted once over the thread's turns:
// the turn that started it counts its first two model calls, and the
// thread's next turn, after a restart, counts only what that turn did
// not, so the turns' ChildUsage together is what the job's model billed.
func TestSweptJobIsCountedOnceAcrossTurns(t *testing.T) {
	forEachKept(t, func(t *testing.T, w *keptWorld) {
		w.leadWaitsDig = true
		c := newClock()
		start := func() *process {
			p := w.start(subagent.WithJobTTL(time.Hour))
			subagent.SetClock(p.s, c.now)
			return p
		}
		p := start()
		cc := threadCtx("cid", "C")
		var counted provider.Usage
		out := p.run(t, cc, "cmd start")
		counted = counted.Add(out.ChildUsage)
		if out.ChildUsage.Requests != 2 {
			t.Errorf("the turn that started the job counts %+v of it, want its first two calls", out.ChildUsage)
		}
		// A sweep still scanning the store when bob's turn starts would
		// make that turn start none: the one C's turn started ends first.
		subagent.WaitSweep(p.s)
		c.add(2 * time.Hour)
		counted = counted.Add(p.run(t, threadCtx("bob", "B"), "hello").ChildUsage)
		subagent.WaitSweep(p.s)
		p.stop(t)
		p = start()
		defer p.stop(t)
		out = p.run(t, cc, "what now?")
		if notes := notesIn(w.firstReq); len(notes) != 1 {
			t.Fatalf("the thread back after the sweep is told %q, want its job swept, once", notes)
		}
		counted = counted.Add(out.ChildUsage)
		counted = counted.Add(p.run(t, cc, "and now?").ChildUsage)
		w.mu.Lock()
		billed := w.forkUsage
		w.mu.Unlock()
		if counted != billed {
			t.Errorf("the thread's turns count %+v of the job; its model billed %+v", counted, billed)
		}
	})
}

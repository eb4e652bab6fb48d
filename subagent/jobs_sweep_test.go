package subagent_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// clock is a test's clock, moved by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func threadCtx(owner, th string) context.Context {
	return agent.WithOwner(agent.WithThread(context.Background(), th), owner)
}

// Threads that never come back do not stay in memory: once their TTL has
// passed, the next use of the spawner sweeps them, cancelling the jobs
// they left running, and a swept thread that does come back has no jobs.
func TestAbandonedThreadsAreSwept(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	m := &threadModel{dig: make(chan struct{})} // the jobs dig until cancelled
	a, s := threadLead(t, m, subagent.WithJobTTL(time.Hour))
	c := newClock()
	subagent.SetClock(s, c.now)
	const n = 100
	for i := range n {
		ctx := threadCtx("owner"+strconv.Itoa(i), "thread")
		if _, err := a.Run(ctx, agent.Input{Text: "cmd start"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := subagent.ThreadsHeld(s); got != n {
		t.Fatalf("%d threads held after %d started a job, want %d", got, n, n)
	}
	c.add(59 * time.Minute)
	if _, err := a.Run(threadCtx("someone", "else"), agent.Input{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	subagent.WaitSweep(s)
	if got := subagent.ThreadsHeld(s); got != n {
		t.Fatalf("%d threads held before their TTL passed, want %d", got, n)
	}
	c.add(5 * time.Minute) // the TTL, and a sixteenth of it between sweeps
	if _, err := a.Run(threadCtx("someone", "else"), agent.Input{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	subagent.WaitSweep(s)
	if got := subagent.ThreadsHeld(s); got != 0 {
		t.Errorf("%d threads held after their TTL passed, want none", got)
	}
	// Every job the abandoned threads left running has ended, before
	// the spawner is closed.
	goleak.VerifyNone(t, ignore)
	if got := s.Jobs(threadCtx("owner0", "thread")).List(); len(got) != 0 {
		t.Errorf("a swept thread come back has the jobs %+v", got)
	}
}

// With a store, a job swept while its process holds its thread, and one
// left running by a process that stopped and swept by the next, are kept
// ended as swept, with what they spent: their thread, if it comes back,
// is told of them and counts that usage, once.
func TestSweptJobsAreToldWithTheirUsage(t *testing.T) {
	forEachKept(t, func(t *testing.T, w *keptWorld) {
		c := newClock()
		start := func() *process {
			p := w.start(subagent.WithJobTTL(time.Hour))
			subagent.SetClock(p.s, c.now)
			return p
		}
		waitDig := func() {
			select {
			case <-w.inDig:
			case <-time.After(30 * time.Second):
				t.Fatal("the job never reached its second step")
			}
		}
		spent := func() (u int64) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.forkUsage.Tokens()
		}
		told := func(p *process, ctx context.Context, want int64) {
			t.Helper()
			out := p.run(t, ctx, "what now?")
			notes := notesIn(w.firstReq)
			if len(notes) != 1 || !strings.Contains(notes[0], "did not come back within 1h0m0s") {
				t.Fatalf("the thread back after the sweep is told %q, want its job swept, once", notes)
			}
			if out.ChildUsage.Tokens() != want {
				t.Errorf("the turn told of the swept job counts %d tokens of its children, want what the job spent that the turn that started it did not count, %d", out.ChildUsage.Tokens(), want)
			}
		}

		// A process starts a job in thread A, then stops while it runs.
		p := start()
		a := threadCtx("ann", "A")
		firstA := p.run(t, a, "cmd start").ChildUsage.Tokens() // what the turn that started the job counted of it
		waitDig()
		p.stop(t)
		spentA := spent()

		// The next process sweeps it, A not being back within the TTL.
		c.add(2 * time.Hour)
		p = start()
		p.run(t, threadCtx("bob", "B"), "hello")
		subagent.WaitSweep(p.s)
		// Thread C starts a job in this process, and leaves.
		cc := threadCtx("cid", "C")
		firstC := p.run(t, cc, "cmd start").ChildUsage.Tokens()
		waitDig()
		spentC := spent() - spentA
		told(p, a, spentA-firstA)
		if w.forks.Load() != 4 || w.effect.Load() != 2 {
			t.Errorf("the jobs made %d model calls and ran their effect %d times, want 4 and 2: A's was not run again", w.forks.Load(), w.effect.Load())
		}

		// C is swept while this process holds it, then the process stops.
		c.add(2 * time.Hour)
		p.run(t, threadCtx("bob", "B"), "hello")
		subagent.WaitSweep(p.s)
		if got := subagent.ThreadsHeld(p.s); got > 2 {
			t.Errorf("%d threads held after the sweep, want at most A's and B's", got)
		}
		p.stop(t)
		p = start()
		defer p.stop(t)
		told(p, cc, spentC-firstC)
		seen := len(w.firstReq.Messages) // the thread's conversation so far
		out := p.run(t, cc, "and now?")
		if notes := notesIn(provider.Request{Messages: w.firstReq.Messages[seen:]}); len(notes) != 0 || !out.ChildUsage.IsZero() {
			t.Errorf("the thread's next turn is told %q and counts %+v again", notes, out.ChildUsage)
		}
	})
}

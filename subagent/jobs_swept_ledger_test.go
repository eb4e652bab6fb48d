package subagent_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// A job that spends during the turn that started it, then is swept while
// its process holds its thread, is counted once over the thread's turns:
// the turn that started it counts its first two model calls, and the
// thread's next turn, after a restart, counts only what that turn did
// not (its third, made after that turn ended), so the turns' ChildUsage together is what the job's model billed,
// and their Cost together what every model call cost.
func TestSweptJobIsCountedOnceAcrossTurns(t *testing.T) {
	price := provider.Price{Input: 0.001, Output: 0.004}
	prices, err := provider.NewPrices(map[string]provider.Price{"m": price})
	if err != nil {
		t.Fatal(err)
	}
	forEachKept(t, func(t *testing.T, w *keptWorld) {
		w.leadWaitsDig = true
		w.model = "m"
		w.moreDigs = 1
		w.leadOpts = []agent.Option{agent.WithPrices(prices)}
		c := newClock()
		start := func() *process {
			p := w.start(subagent.WithJobTTL(time.Hour))
			subagent.SetClock(p.s, c.now)
			return p
		}
		p := start()
		cc := threadCtx("cid", "C")
		var counted provider.Usage
		var cost float64
		turn := func(p *process, ctx context.Context, text string) agent.Output {
			out := p.run(t, ctx, text)
			counted = counted.Add(out.ChildUsage)
			cost += out.Cost
			return out
		}
		out := turn(p, cc, "cmd start")
		if out.ChildUsage.Requests != 2 {
			t.Errorf("the turn that started the job counts %+v of it, want its first two calls", out.ChildUsage)
		}
		// A sweep still scanning the store when bob's turn starts would
		// make that turn start none: the one C's turn started ends first.
		subagent.WaitSweep(p.s)
		// The job spends once more after the turn that started it ended:
		// the store keeps that part for the turn that takes it.
		<-w.inDig
		w.dig <- struct{}{}
		select {
		case <-w.inDig:
		case <-time.After(30 * time.Second):
			t.Fatal("the job did not dig again")
		}
		c.add(2 * time.Hour)
		turn(p, threadCtx("bob", "B"), "hello")
		subagent.WaitSweep(p.s)
		p.stop(t)
		p = start()
		defer p.stop(t)
		turn(p, cc, "what now?")
		if notes := notesIn(w.firstReq); len(notes) != 1 {
			t.Fatalf("the thread back after the sweep is told %q, want its job swept, once", notes)
		}
		turn(p, cc, "and now?")
		w.mu.Lock()
		billed, all := w.forkUsage, w.billed
		w.mu.Unlock()
		if counted != billed {
			t.Errorf("the thread's turns count %+v of the job; its model billed %+v", counted, billed)
		}
		if want := price.Cost(all); math.Abs(cost-want) > 1e-12 {
			t.Errorf("the turns cost $%.6f together; their model calls were billed $%.6f (%v)", cost, want, all)
		}
	})
}

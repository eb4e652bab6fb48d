package subagent_test

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// pricedThreadModel is a threadModel whose replies name their model, so
// that a price table prices them, and whose fork spends in two turns:
// its first call during the lead's turn (the lead's call after the spawn
// waits until the fork asks again, its first call counted), its second
// once release is closed.
type pricedThreadModel struct {
	*threadModel
	forkCalls      atomic.Int32
	first, release chan struct{}
}

func newPricedThreadModel(m *threadModel) *pricedThreadModel {
	return &pricedThreadModel{threadModel: m, first: make(chan struct{}), release: make(chan struct{})}
}

func (m *pricedThreadModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	var gate <-chan struct{}
	switch {
	case strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]):
		if m.forkCalls.Add(1) == 2 {
			close(m.first)
		}
		if m.forkCalls.Load() > 1 {
			gate = m.release
		}
	case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
		gate = m.first
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
	}
	resp, err := m.threadModel.Complete(ctx, req)
	resp.Model = "m"
	return resp, err
}

// pricedThread is a thread of a lead under a price table whose first
// turn started a job that spends in both turns (pricedThreadModel).
type pricedThread struct {
	m     *threadModel
	p     *pricedThreadModel
	s     *subagent.Spawner
	lead  *agent.React
	ctx   context.Context
	price provider.Price
	first agent.Output // the first turn's
}

func startPricedThread(t *testing.T, id func(n int64, i int) string) pricedThread {
	t.Helper()
	th := pricedThread{m: &threadModel{dig: make(chan struct{}), id: id}, price: provider.Price{Input: 0.001, Output: 0.002}}
	close(th.m.dig)
	th.p = newPricedThreadModel(th.m)
	prices, err := provider.NewPrices(map[string]provider.Price{"m": th.price})
	if err != nil {
		t.Fatal(err)
	}
	var reg *tool.Registry
	reg, th.s = setup(t, th.p, true, []subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil)}, digTool(th.m))
	t.Cleanup(func() { th.s.Close() })
	th.lead = lead(t, th.p, reg, agent.WithPrices(prices))
	th.ctx = agent.WithThread(t.Context(), "t1")
	if th.first, err = th.lead.Run(th.ctx, agent.Input{Text: "cmd start"}); err != nil {
		t.Fatal(err)
	}
	return th
}

// checkBill fails t unless the thread's turns, the first and then, count
// what the models billed, in tokens and in dollars.
func (th pricedThread) checkBill(t *testing.T, then agent.Output) {
	t.Helper()
	th.m.mu.Lock()
	billed := th.m.billed
	th.m.mu.Unlock()
	if got := th.first.TotalUsage().Add(then.TotalUsage()); got != billed {
		t.Errorf("the turns count %+v; the models billed %+v", got, billed)
	}
	want := th.price.Cost(billed)
	if got := th.first.Cost + then.Cost; math.Abs(got-want) > 1e-9 {
		t.Errorf("the turns cost $%.6f + $%.6f = $%.6f; the models billed $%.6f", th.first.Cost, then.Cost, got, want)
	}
}

// What a thread's job that ended between turns cost counts in the turn
// told of it, as its tokens do: over the thread's turns, Output.Cost adds
// up to what the models billed at the prices, as Usage + ChildUsage adds
// up to their tokens.
func TestJobNoteCountsItsCost(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			th := startPricedThread(t, mode.id)
			close(th.p.release)
			for deadline := time.Now().Add(10 * time.Second); th.s.Jobs(th.ctx).List()[0].State == subagent.JobRunning; {
				if time.Now().After(deadline) {
					t.Fatal("the job did not end")
				}
				time.Sleep(time.Millisecond)
			}
			out2, err := th.lead.Run(th.ctx, agent.Input{Text: "what now?"})
			if err != nil {
				t.Fatal(err)
			}
			th.checkBill(t, out2)
		})
	}
}

// A thread's job that the next turn collects with the jobs tool counts
// its cost there, as its tokens, in the three id modes.
func TestCollectedJobCountsItsCost(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			th := startPricedThread(t, mode.id)
			close(th.p.release)
			out2, err := th.lead.Run(th.ctx, agent.Input{Text: "cmd wait"})
			if err != nil {
				t.Fatal(err)
			}
			if out2.Answer != "lead: found gold; messages: " {
				t.Fatalf("the second turn answered %q: want the job's answer", out2.Answer)
			}
			th.checkBill(t, out2)
		})
	}
}

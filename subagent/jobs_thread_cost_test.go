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

// What a thread's job that ended between turns cost counts in the turn
// told of it, as its tokens do: over the thread's turns, Output.Cost adds
// up to what the models billed at the prices, as Usage + ChildUsage adds
// up to their tokens.
func TestJobNoteCountsItsCost(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			m := &threadModel{dig: make(chan struct{}), id: mode.id}
			close(m.dig)
			p := newPricedThreadModel(m)
			price := provider.Price{Input: 0.001, Output: 0.002}
			prices, err := provider.NewPrices(map[string]provider.Price{"m": price})
			if err != nil {
				t.Fatal(err)
			}
			reg, s := setup(t, p, true, []subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil)}, digTool(m))
			t.Cleanup(func() { s.Close() })
			a := lead(t, p, reg, agent.WithPrices(prices))
			ctx := agent.WithThread(t.Context(), "t1")
			out1, err := a.Run(ctx, agent.Input{Text: "cmd start"})
			if err != nil {
				t.Fatal(err)
			}
			close(p.release)
			for deadline := time.Now().Add(10 * time.Second); s.Jobs(ctx).List()[0].State == subagent.JobRunning; {
				if time.Now().After(deadline) {
					t.Fatal("the job did not end")
				}
				time.Sleep(time.Millisecond)
			}
			out2, err := a.Run(ctx, agent.Input{Text: "what now?"})
			if err != nil {
				t.Fatal(err)
			}
			m.mu.Lock()
			billed := m.billed
			m.mu.Unlock()
			if got := out1.TotalUsage().Add(out2.TotalUsage()); got != billed {
				t.Errorf("the turns count %+v; the models billed %+v", got, billed)
			}
			want := price.Cost(billed)
			if got := out1.Cost + out2.Cost; math.Abs(got-want) > 1e-9 {
				t.Errorf("the turns cost $%.6f + $%.6f = $%.6f; the models billed $%.6f", out1.Cost, out2.Cost, got, want)
			}
		})
	}
}

// A thread's job that the next turn collects with the jobs tool counts
// its cost there, as its tokens, in the three id modes.
func TestCollectedJobCountsItsCost(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			m := &threadModel{dig: make(chan struct{}), id: mode.id}
			close(m.dig)
			p := newPricedThreadModel(m)
			price := provider.Price{Input: 0.001, Output: 0.002}
			prices, err := provider.NewPrices(map[string]provider.Price{"m": price})
			if err != nil {
				t.Fatal(err)
			}
			reg, s := setup(t, p, true, []subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil)}, digTool(m))
			t.Cleanup(func() { s.Close() })
			a := lead(t, p, reg, agent.WithPrices(prices))
			ctx := agent.WithThread(t.Context(), "t1")
			out1, err := a.Run(ctx, agent.Input{Text: "cmd start"})
			if err != nil {
				t.Fatal(err)
			}
			close(p.release)
			out2, err := a.Run(ctx, agent.Input{Text: "cmd wait"})
			if err != nil {
				t.Fatal(err)
			}
			if out2.Answer != "lead: found gold; messages: " {
				t.Fatalf("the second turn answered %q: want the job's answer", out2.Answer)
			}
			m.mu.Lock()
			billed := m.billed
			m.mu.Unlock()
			if got := out1.TotalUsage().Add(out2.TotalUsage()); got != billed {
				t.Errorf("the turns count %+v; the models billed %+v", got, billed)
			}
			want := price.Cost(billed)
			if got := out1.Cost + out2.Cost; math.Abs(got-want) > 1e-9 {
				t.Errorf("the turns cost $%.6f + $%.6f = $%.6f; the models billed $%.6f", out1.Cost, out2.Cost, got, want)
			}
		})
	}
}

package subagent_test

import (
	"context"
	"math"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// windingModel is a threadModel whose lead, in the turn that starts the
// job, answers only once the job has ended (ended), and whose next turn
// lets the first turn's wind-up go on (release) once its own first model
// call is asked for, after it was told of the job.
type windingModel struct {
	*threadModel
	ended, release chan struct{}
	once           sync.Once
}

func (m *windingModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	if !isFork(req) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case req.Messages[0].Content == "what now?":
			m.once.Do(func() { close(m.release) })
		case last.Role == provider.RoleTool:
			select {
			case <-m.ended:
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		}
	}
	resp, err := m.threadModel.Complete(ctx, req)
	resp.Model = "m"
	return resp, err
}

func isFork(req provider.Request) bool {
	return len(req.System) >= 20 && req.System[:20] == subagent.DefaultForkPrompt[:20]
}

// A later turn of a thread told of a job while the turn that started it
// still winds up (it has not reported what it spent) counts the same part
// of the job in tokens and in dollars as that turn leaves it: here none,
// since the job's model calls all ended within the first turn, which
// counts them, tokens and dollars alike. Each turn's Output.Cost is what
// its tokens cost at the model's price, and over both turns each is
// counted once. (The later turn took the job's tokens and left its
// dollars to the first.) In the three id modes.
func TestJobTakenWhileItsTurnWindsUpSplitsAlike(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			m := &windingModel{threadModel: &threadModel{dig: make(chan struct{}), id: mode.id}, ended: make(chan struct{}), release: make(chan struct{})}
			close(m.dig)
			price := provider.Price{Input: 0.001, Output: 0.002}
			prices, err := provider.NewPrices(map[string]provider.Price{"m": price})
			if err != nil {
				t.Fatal(err)
			}
			reg, s := setup(t, m, true, []subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil)}, digTool(m.threadModel))
			defer s.Close()
			// Two leads over the thread, as two servers' (an agent runs
			// one turn at a time).
			a, b := lead(t, m, reg, agent.WithPrices(prices)), lead(t, m, reg, agent.WithPrices(prices))
			ctx := agent.WithThread(t.Context(), "t1")
			var endOnce sync.Once
			// Each turn's ledger, as the AG-UI handler gives it, whose
			// entries its RUN_FINISHED reports.
			ctx1, l1 := ledger.With(ctx)
			ctx2, l2 := ledger.With(ctx)
			sink := event.SinkFunc(func(e event.Event) {
				if e.Type == event.Custom && e.Name == subagent.JobEndedEvent {
					// The job has ended: the first turn answers, and its
					// wind-up waits for this event to be passed on.
					endOnce.Do(func() { close(m.ended) })
					<-m.release
				}
			})
			type result struct {
				out agent.Output
				err error
			}
			first := make(chan result, 1)
			go func() {
				out, err := a.Run(event.WithSink(ctx1, sink), agent.Input{Text: "cmd start"})
				first <- result{out, err}
			}()
			<-m.ended
			out2, err := b.Run(ctx2, agent.Input{Text: "what now?"})
			if err != nil {
				t.Fatal(err)
			}
			r1 := <-first
			if r1.err != nil {
				t.Fatal(r1.err)
			}
			out1 := r1.out
			m.mu.Lock()
			billed := m.billed
			m.mu.Unlock()
			for i, out := range []agent.Output{out1, out2} {
				if want := price.Cost(out.TotalUsage()); math.Abs(out.Cost-want) > 1e-12 {
					t.Errorf("turn %d counts %+v, which cost $%.6f, and $%.6f: its tokens and its dollars are not the same part of the job", i+1, out.TotalUsage(), want, out.Cost)
				}
				var dollars float64
				for _, e := range []*ledger.Ledger{l1, l2}[i].Entries() {
					dollars += e.Cost
				}
				if got := []*ledger.Ledger{l1, l2}[i].Total(); got != out.TotalUsage() || math.Abs(dollars-out.Cost) > 1e-12 {
					t.Errorf("turn %d's ledger (its RUN_FINISHED) counts %+v, $%.6f; its Output %+v, $%.6f", i+1, got, dollars, out.TotalUsage(), out.Cost)
				}
			}
			if got := out1.TotalUsage().Add(out2.TotalUsage()); got != billed {
				t.Errorf("the turns count %+v and %+v; the models billed %+v", out1.TotalUsage(), out2.TotalUsage(), billed)
			}
			if got, want := out1.Cost+out2.Cost, price.Cost(billed); math.Abs(got-want) > 1e-12 {
				t.Errorf("the turns cost $%.6f; the models billed $%.6f", got, want)
			}
			if !out2.ChildUsage.IsZero() {
				t.Errorf("the later turn counts %+v of the job, whose calls all ended in the first turn, which counts them", out2.ChildUsage)
			}
		})
	}
}

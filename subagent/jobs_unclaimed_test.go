package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// orphanModel is a lead that starts three background jobs ("count",
// "late", "hold") and answers once the "count" job has ended; its forks
// answer at once ("count"), answer once gate is closed ("late"), or,
// once gate is closed, call hold, which holds until cancelled ("hold").
// Every call bills a token each way, at model "m".
type orphanModel struct {
	ids     int
	fresh   atomic.Int64
	gate    chan struct{}
	holding chan struct{} // closed when the "hold" job is in its tool
	counted func()        // waits, before the lead answers, for "count" to end (the first job listed)
	mu      sync.Mutex
	billed  provider.Usage
}

func (m *orphanModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	u := provider.Usage{InputTokens: 1, OutputTokens: 1, Requests: 1}
	reply := func(text string, cs ...provider.ToolCall) (provider.Response, error) {
		resumetest.NameCalls(m.ids, cs, &m.fresh)
		m.mu.Lock()
		m.billed = m.billed.Add(u)
		m.mu.Unlock()
		return provider.Response{Message: provider.AssistantMessage(text, cs...), Usage: u, Model: "m"}, nil
	}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		task := firstUser(req)
		if !strings.Contains(task, "count") && len(toolResults(req.Messages)) == 0 {
			select {
			case <-m.gate:
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		}
		if strings.Contains(task, "hold") {
			return reply("", provider.ToolCall{Name: "hold", Arguments: json.RawMessage(`{}`)})
		}
		return reply("done")
	}
	if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleUser && last.Content == "start" {
		var cs []provider.ToolCall
		for _, task := range []string{"count", "late", "hold"} {
			cs = append(cs, provider.ToolCall{Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"` + task + `","background":true}`)})
		}
		return reply("", cs...)
	}
	if last := req.Messages[len(req.Messages)-1]; m.counted != nil && last.Role == provider.RoleTool {
		m.counted()
	}
	return reply("ok")
}

func (m *orphanModel) total() provider.Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.billed
}

// A thread's jobs that no turn takes, because the thread never comes back
// and the sweep ends them, or because Close does, are not lost to the
// books: what they spent that the turn that started them did not count is
// the spawner's Unclaimed, per model and priced, so that the turns (their
// Output and RUN_FINISHED) and Unclaimed together count what the model
// billed, each call once. The first turn counts the job that ended in it
// ("count"); Unclaimed holds the job that ended after it, never told of
// ("late"), and the one still running, swept or closed ("hold"). With
// models that name their calls afresh, not at all, or from call_0.
func TestUnclaimedJobsAreCounted(t *testing.T) {
	for _, how := range []string{"swept", "closed"} {
		for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprint(how, "/ids=", mode), func(t *testing.T) {
				defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
				m := &orphanModel{ids: mode, gate: make(chan struct{}), holding: make(chan struct{})}
				var once sync.Once
				hold := tool.Func{Def: tool.Definition{Name: "hold", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
						once.Do(func() { close(m.holding) })
						<-ctx.Done()
						return tool.Result{}, ctx.Err()
					}}
				tools, err := tool.NewRegistry(hold)
				if err != nil {
					t.Fatal(err)
				}
				s, err := subagent.NewSpawner(m, tools, subagent.WithJobsAcrossTurns(nil), subagent.WithJobTTL(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				c := newClock()
				subagent.SetClock(s, c.now)
				prices, err := provider.NewPrices(map[string]provider.Price{"m": gapPrice})
				if err != nil {
					t.Fatal(err)
				}
				lead, err := agent.NewReact(m, agent.WithName("lead"), agent.WithTools(s, s.JobsTool(), hold), agent.WithPrices(prices))
				if err != nil {
					t.Fatal(err)
				}
				ann := threadCtx("ann", "t1")
				m.counted = func() {
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
						if st := s.Jobs(ann).List(); len(st) == 3 && st[0].State == subagent.JobDone {
							return
						}
						if time.Now().After(deadline) {
							t.Errorf("the count job did not end in its turn: %+v", s.Jobs(ann).List())
							return
						}
					}
				}
				var turns provider.Usage // what the turns count, Output and RUN_FINISHED
				var dollars, finishedDollars float64
				var inFinished provider.Usage
				turn := func(ctx context.Context, text string) {
					t.Helper()
					lctx, l := ledger.With(ctx)
					out, err := lead.Run(lctx, agent.Input{Text: text})
					if err != nil {
						t.Fatal(err)
					}
					turns, dollars = turns.Add(out.TotalUsage()), dollars+out.Cost
					u, d := finished(t, l, out)
					inFinished, finishedDollars = inFinished.Add(u), finishedDollars+d
				}
				turn(ann, "start")
				if len(s.Jobs(ann).List()) != 3 {
					t.Fatalf("the first turn left the jobs %+v, want three", s.Jobs(ann).List())
				}
				close(m.gate)
				<-m.holding
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					if st := s.Jobs(ann).List(); st[1].State == subagent.JobDone {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the late job did not end")
					}
				}
				switch how {
				case "swept":
					// Ann never comes back; another owner's turn, past the
					// TTL, sweeps her thread.
					c.add(2 * time.Hour)
					turn(threadCtx("bob", "t2"), "hello")
					subagent.WaitSweep(s)
					if got := subagent.ThreadsHeld(s); got != 0 {
						t.Fatalf("%d threads held after the sweep, want none: ann's swept, bob's with no jobs", got)
					}
				case "closed":
					s.Close()
				}
				billed := m.total()
				unclaimed := s.Unclaimed()
				var u provider.Usage
				var cost float64
				for _, e := range unclaimed {
					if e.Model != "m" {
						t.Errorf("Unclaimed has an entry of model %q: %+v", e.Model, e)
					}
					u, cost = u.Add(e.Usage), cost+e.Cost
				}
				if want := (provider.Usage{InputTokens: 2, OutputTokens: 2, Requests: 2}); u != want {
					t.Errorf("Unclaimed holds %+v; want the late and held jobs' two calls, %+v", u, want)
				}
				if got := turns.Add(u); got != billed {
					t.Errorf("the turns count %+v and Unclaimed %+v: %+v in all; the model billed %+v", turns, u, got, billed)
				}
				if got, want := dollars+cost, gapPrice.Cost(billed); !sameCost(got, want) {
					t.Errorf("the turns cost $%.6f and Unclaimed $%.6f: $%.6f; the model billed $%.6f", dollars, cost, got, want)
				}
				billed.Requests, u.Requests = 0, 0
				if got := inFinished.Add(u); got != billed {
					t.Errorf("RUN_FINISHED counts %+v and Unclaimed %+v: %+v in all; the model billed %+v", inFinished, u, got, billed)
				}
				if got, want := finishedDollars+cost, gapPrice.Cost(billed); !sameCost(got, want) {
					t.Errorf("RUN_FINISHED costs $%.6f and Unclaimed $%.6f: $%.6f; the model billed $%.6f", finishedDollars, cost, got, want)
				}
				s.Close()
				if again := s.Unclaimed(); fmt.Sprint(again) != fmt.Sprint(unclaimed) {
					t.Errorf("Unclaimed is %+v after Close, %+v before", again, unclaimed)
				}
			})
		}
	}
}

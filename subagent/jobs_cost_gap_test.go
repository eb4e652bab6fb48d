package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// gapModel is a lead that runs the tool its turn names ("hook" or
// "drive"), or starts a background job ("start"), then answers; after
// a tool result of "hooked" it starts a job too. Its first fork call
// waits until gate is closed; every call bills a token each way, at
// model "m".
type gapModel struct {
	ids    int
	fresh  atomic.Int64
	gate   chan struct{}
	forks  atomic.Int32
	mu     sync.Mutex
	billed provider.Usage
}

func (m *gapModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	u := provider.Usage{InputTokens: 1, OutputTokens: 1, Requests: 1}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		if m.forks.Add(1) == 1 {
			select {
			case <-m.gate:
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		}
		m.bill(u)
		return provider.Response{Message: provider.AssistantMessage("done"), Usage: u, Model: "m"}, nil
	}
	m.bill(u)
	last := req.Messages[len(req.Messages)-1]
	var cs []provider.ToolCall
	switch {
	case last.Role == provider.RoleTool && last.Content == "hooked", last.Role == provider.RoleUser && last.Content == "start":
		cs = []provider.ToolCall{{Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)}}
	case last.Role == provider.RoleUser && (last.Content == "hook" || last.Content == "drive"):
		cs = []provider.ToolCall{{Name: last.Content, Arguments: json.RawMessage(`{}`)}}
	default:
		return provider.Response{Message: provider.AssistantMessage("ok"), Usage: u, Model: "m"}, nil
	}
	resumetest.NameCalls(m.ids, cs, &m.fresh)
	return provider.Response{Message: provider.AssistantMessage("", cs...), Usage: u, Model: "m"}, nil
}

func (m *gapModel) bill(u provider.Usage) {
	m.mu.Lock()
	m.billed = m.billed.Add(u)
	m.mu.Unlock()
}

func (m *gapModel) total() provider.Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.billed
}

var gapPrice = provider.Price{Input: 0.001, Output: 0.002}

// gapLead returns a lead over m pricing model "m" at gapPrice, with the
// spawner's tools and extra, its spawner and a context of thread t1.
func gapLead(t *testing.T, m *gapModel, note func(subagent.JobResult) string, extra func(*subagent.Spawner) tool.Tool) (*agent.React, *subagent.Spawner, context.Context) {
	t.Helper()
	tools, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	s, err := subagent.NewSpawner(m, tools, subagent.WithMaxSpawns(100), subagent.WithJobsAcrossTurns(note))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	prices, err := provider.NewPrices(map[string]provider.Price{"m": gapPrice})
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(m, agent.WithName("lead"), agent.WithTools(s, s.JobsTool(), extra(s)), agent.WithPrices(prices))
	if err != nil {
		t.Fatal(err)
	}
	return lead, s, agent.WithThread(t.Context(), "t1")
}

// awaitJobs waits until none of the thread's jobs runs.
func awaitJobs(t *testing.T, s *subagent.Spawner, ctx context.Context) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		running := false
		for _, st := range s.Jobs(ctx).List() {
			running = running || st.State == subagent.JobRunning
		}
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the jobs did not end")
		}
	}
}

func sameCost(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }

// A thread's job whose model call ends while the run that started it
// winds up (after the run took stock of what the job had spent, before it
// reported its cost) counts that call's cost once over the thread's
// turns: the turn that collects the job does not count again what the
// starting run reported. The gap is held open by the starting run's own
// wind-up: it lets the job's call go and waits for the job to end.
func TestJobCostInRunsWindUpCountsOnce(t *testing.T) {
	for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", mode), func(t *testing.T) {
			m := &gapModel{ids: mode, gate: make(chan struct{})}
			var tctx context.Context
			var sp *subagent.Spawner
			var hookErr atomic.Value
			hook := func(s *subagent.Spawner) tool.Tool {
				sp = s
				return tool.Func{Def: tool.Definition{Name: "hook", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
						// Registered before the job starts, it runs after
						// what the job registers as the run ends.
						run.OnEnd(ctx, func() provider.Usage {
							close(m.gate)
							for deadline := time.Now().Add(10 * time.Second); sp.Jobs(tctx).List()[0].State == subagent.JobRunning; time.Sleep(time.Millisecond) {
								if time.Now().After(deadline) {
									hookErr.Store("the job did not end")
									break
								}
							}
							return provider.Usage{}
						})
						return tool.Result{Content: "hooked"}, nil
					}}
			}
			lead, s, ctx := gapLead(t, m, nil, hook)
			tctx = ctx
			out1, err := lead.Run(ctx, agent.Input{Text: "hook"})
			if err != nil {
				t.Fatal(err)
			}
			if e := hookErr.Load(); e != nil {
				t.Fatal(e)
			}
			if st := s.Jobs(ctx).List(); len(st) != 1 || st[0].State == subagent.JobRunning {
				t.Fatalf("the thread's jobs after the first turn: %+v, want one that ended", st)
			}
			out2, err := lead.Run(ctx, agent.Input{Text: "what now?"})
			if err != nil {
				t.Fatal(err)
			}
			billed := m.total()
			if got := out1.TotalUsage().Add(out2.TotalUsage()); got != billed {
				t.Errorf("the turns count %+v; the model billed %+v", got, billed)
			}
			if got, want := out1.Cost+out2.Cost, gapPrice.Cost(billed); !sameCost(got, want) {
				t.Errorf("the turns cost $%.6f + $%.6f = $%.6f; the model billed $%.6f", out1.Cost, out2.Cost, got, want)
			}
		})
	}
}

// A turn that collects the oldest of a thread's jobs past the 64 it
// keeps (their note "" leaves them to a wait) counts what they spent
// after the turn that started them ended, in dollars as in tokens; the
// jobs it starts count in it as they spend, and a wait that collects them
// later owes nothing more. Over the turns and a last wait, the thread
// counts what the model billed.
func TestPrunedJobCountsItsCost(t *testing.T) {
	const driven = 69
	for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", mode), func(t *testing.T) {
			m := &gapModel{ids: mode, gate: make(chan struct{})}
			drive := func(s *subagent.Spawner) tool.Tool {
				return tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
						jobs := s.Jobs(ctx)
						for range driven {
							job, err := jobs.Start(ctx, subagent.Task{Task: "answer"})
							if err != nil {
								return tool.Result{}, err
							}
							for st := job; st.State == subagent.JobRunning; time.Sleep(100 * time.Microsecond) {
								if st, err = jobs.Status(job.ID); err != nil {
									return tool.Result{}, err
								}
							}
						}
						return tool.Result{Content: "driven"}, nil
					}}
			}
			lead, s, ctx := gapLead(t, m, func(subagent.JobResult) string { return "" }, drive)
			out1, err := lead.Run(ctx, agent.Input{Text: "start"})
			if err != nil {
				t.Fatal(err)
			}
			close(m.gate) // the first job spends once its turn has ended
			awaitJobs(t, s, ctx)
			out2, err := lead.Run(ctx, agent.Input{Text: "drive"})
			if err != nil {
				t.Fatal(err)
			}
			if n := int64(driven + 1); out2.ChildUsage != (provider.Usage{InputTokens: n, OutputTokens: n, Requests: n}) {
				t.Fatalf("the second turn's ChildUsage is %+v, want that of the %d jobs it ran and the one it collected", out2.ChildUsage, driven)
			}
			rest, err := s.Jobs(ctx).Wait(ctx, subagent.WaitFor{Timeout: time.Minute})
			if err != nil || len(rest) != 64 {
				t.Fatalf("a wait collects %d jobs (%v), want 64", len(rest), err)
			}
			counted := out1.TotalUsage().Add(out2.TotalUsage())
			for _, r := range rest {
				if !r.Result.Usage.IsZero() {
					t.Errorf("the wait collects job %s with %+v, which the turn that started it counted", r.ID, r.Result.Usage)
				}
				counted = counted.Add(r.Result.Usage)
			}
			billed := m.total()
			if counted != billed {
				t.Errorf("the turns and the wait count %+v; the model billed %+v", counted, billed)
			}
			if got, want := out1.Cost+out2.Cost, gapPrice.Cost(billed); !sameCost(got, want) {
				t.Errorf("the turns cost $%.6f + $%.6f = $%.6f; the model billed $%.6f", out1.Cost, out2.Cost, got, want)
			}
		})
	}
}

// finished is what RUN_FINISHED reports of a turn run under the ledger l
// that answered out, per model: its entries' tokens (requests aside) and
// dollars.
func finished(t *testing.T, l *ledger.Ledger, out agent.Output) (provider.Usage, float64) {
	t.Helper()
	var entries []struct {
		Model   string  `json:"model"`
		In      int64   `json:"inputTokens"`
		Out     int64   `json:"outputTokens"`
		CostUsd float64 `json:"costUsd"`
	}
	if raw := ledger.JSON(l, out.TotalUsage()); raw != nil {
		if err := json.Unmarshal(raw, &entries); err != nil {
			t.Fatal(err)
		}
	}
	var u provider.Usage
	var dollars float64
	for _, e := range entries {
		if e.Model == "" {
			t.Errorf("RUN_FINISHED has an entry of no model: %+v", e)
			continue
		}
		u.InputTokens += e.In
		u.OutputTokens += e.Out
		dollars += e.CostUsd
	}
	return u, dollars
}

// A thread's job whose model call ends while the turn that started it
// winds up counts that call once over the thread's turns, in tokens and in
// dollars, on every surface: whether the call ends as the run ends (held
// by a hook of its end), or after the run has returned but before its
// RUN_FINISHED is built. Each turn counts, in its Output (Usage and
// ChildUsage, Cost) and its RUN_FINISHED (tokens and dollars per model,
// nothing unattributed), what the model had billed by the time it
// returned, and no more; the turn that takes the job counts the rest.
func TestJobCallInWindUpCountsOnceInRunFinished(t *testing.T) {
	for _, when := range []string{"run's end", "after the run"} {
		for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprint(when, "/ids=", mode), func(t *testing.T) {
				m := &gapModel{ids: mode, gate: make(chan struct{})}
				var tctx context.Context
				var sp *subagent.Spawner
				hook := func(s *subagent.Spawner) tool.Tool {
					sp = s
					return tool.Func{Def: tool.Definition{Name: "hook", Parameters: json.RawMessage(`{"type":"object"}`)},
						Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
							if when == "run's end" {
								run.OnEnd(ctx, func() provider.Usage {
									close(m.gate)
									awaitJobs(t, sp, tctx)
									return provider.Usage{}
								})
							}
							return tool.Result{Content: "hooked"}, nil
						}}
				}
				lead, s, ctx := gapLead(t, m, nil, hook)
				tctx = ctx
				var before provider.Usage // billed before the turn
				turn := func(n int, text string, after func()) {
					t.Helper()
					lctx, l := ledger.With(ctx)
					out, err := lead.Run(lctx, agent.Input{Text: text})
					if err != nil {
						t.Fatal(err)
					}
					billed := m.total()
					bill := provider.Usage{InputTokens: billed.InputTokens - before.InputTokens, OutputTokens: billed.OutputTokens - before.OutputTokens,
						Requests: billed.Requests - before.Requests}
					before = billed
					if after != nil {
						after()
					}
					if got := out.TotalUsage(); got != bill {
						t.Errorf("turn %d: Output counts %+v; the model billed %+v by its end", n, got, bill)
					}
					if got, want := out.Cost, gapPrice.Cost(bill); !sameCost(got, want) {
						t.Errorf("turn %d: Output costs $%.6f; the model billed $%.6f by its end", n, got, want)
					}
					u, dollars := finished(t, l, out)
					if bill.Requests = 0; u != bill {
						t.Errorf("turn %d: RUN_FINISHED counts %+v; the model billed %+v by its end", n, u, bill)
					}
					if want := gapPrice.Cost(bill); !sameCost(dollars, want) {
						t.Errorf("turn %d: RUN_FINISHED costs $%.6f; the model billed $%.6f by its end", n, dollars, want)
					}
				}
				turn(1, "hook", func() {
					if when == "after the run" {
						close(m.gate)
						awaitJobs(t, s, ctx)
					}
				})
				turn(2, "what now?", nil)
				if billed := m.total(); before != billed {
					t.Errorf("the model billed %+v after the turns, %+v by their ends", billed, before)
				}
			})
		}
	}
}

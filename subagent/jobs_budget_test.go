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

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// jobAndForks is a lead that starts one background job, then, in one
// step, forks four children in the foreground and waits for the job, then
// answers. The job's model is held until the four have answered, so that
// the job spends what it was promised when it started after they spent
// theirs. Every model writes as much as its call's output bound lets it,
// and bills as the budget's estimate counts (four bytes a token), so that
// the tree must stay within its limit exactly.
type jobAndForks struct {
	ids     int
	fresh   atomic.Int64
	release chan struct{}
	once    sync.Once
	prices  provider.Price

	mu                 sync.Mutex
	tokens             int64   // billed, all models
	dollars            float64 // billed, all models
	jobCalls, forkRuns int
}

func (w *jobAndForks) bill(req provider.Request, msg provider.Message) provider.Response {
	u := fake.Usage(req, msg)
	w.mu.Lock()
	w.tokens += u.Tokens()
	w.dollars += w.prices.Cost(u)
	w.mu.Unlock()
	return provider.Response{Message: msg, Usage: u, Model: "fake"}
}

func (w *jobAndForks) lead(_ context.Context, req provider.Request) (provider.Response, error) {
	steps := 0
	for _, m := range req.Messages {
		if m.Role == provider.RoleAssistant {
			steps++
		}
	}
	var calls []provider.ToolCall
	switch {
	case len(req.Tools) == 0 || steps >= 2:
		return w.bill(req, provider.AssistantMessage("All parts are in.")), nil
	case steps == 0:
		calls = []provider.ToolCall{spawn(`{"task":"Survey the background part, in full.","background":true}`)}
	case steps == 1:
		for i := range 4 {
			calls = append(calls, spawn(fmt.Sprintf(`{"task":"Write part %d of the survey, in full."}`, i)))
		}
		for _, m := range req.Messages {
			var r struct {
				JobID string `json:"job_id"`
			}
			if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.JobID != "" {
				args, _ := json.Marshal(map[string]any{"action": "wait", "job_id": r.JobID, "timeout_seconds": 600})
				calls = append(calls, provider.ToolCall{Name: subagent.JobsToolName, Arguments: args})
			}
		}
	}
	resumetest.NameCalls(w.ids, calls, &w.fresh)
	return w.bill(req, provider.AssistantMessage("", calls...)), nil
}

// free lets the job's model answer.
func (w *jobAndForks) free() { w.once.Do(func() { close(w.release) }) }

// child writes an essay as long as its output bound allows (8,000 tokens
// unbounded); the background job's child first waits for the release.
func (w *jobAndForks) child(ctx context.Context, req provider.Request) (provider.Response, error) {
	background := strings.Contains(req.Messages[0].Content, "background part")
	if background {
		select {
		case <-w.release:
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
	}
	w.mu.Lock()
	if background {
		w.jobCalls++
	} else if w.forkRuns++; w.forkRuns == 4 {
		w.free()
	}
	w.mu.Unlock()
	n := 8000
	if req.MaxTokens > 0 {
		n = req.MaxTokens
	}
	return w.bill(req, provider.AssistantMessage(strings.Repeat("word", n))), nil
}

// A background job takes its share of the lead's cost limit when it
// starts, and the lead's later steps cannot hand that share out again: a
// lead that starts a job, then forks four children while the job runs and
// collects it,
// costs no more than its limit (its models bill as the budget estimates,
// so the bound has no estimation error to add), and the job and the forks
// all ran. Under a token limit the same holds. With models that name their
// calls afresh, not at all, and from call_0.
func TestBackgroundJobIsReservedUnderALimit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	price := provider.Price{Input: 1e-7, Output: 2e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": price})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []string{"cost", "tokens"} {
		for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprintf("%s, ids %d", limit, ids), func(t *testing.T) {
				w := &jobAndForks{ids: ids, release: make(chan struct{}), prices: price}
				// Should the forks not all answer, the job goes on anyway,
				// and the test fails on the count of their calls.
				defer time.AfterFunc(10*time.Second, w.free).Stop()
				p := fake.NewProvider(fake.Respond(w.lead).For("lead"), fake.Respond(w.child).For(subagent.DefaultForkName)).
					Loop().Named("fake", "fake")
				reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
				opts := []agent.Option{agent.WithPrices(prices)}
				const dollars, tokens = 0.05, 6000
				if limit == "cost" {
					opts = append(opts, agent.WithCostLimit(dollars))
				} else {
					opts = append(opts, agent.WithTokenLimit(tokens))
				}
				out, err := lead(t, p, reg, opts...).Run(t.Context(), agent.Input{Text: "Write the survey."})
				if err != nil {
					t.Errorf("the lead failed: %v", err)
				}
				w.mu.Lock()
				defer w.mu.Unlock()
				t.Logf("billed %d tokens, $%.4f; the job made %d calls, the forks %d; answer %q", w.tokens, w.dollars, w.jobCalls, w.forkRuns, out.Answer)
				if w.jobCalls != 1 || w.forkRuns != 4 {
					t.Errorf("the job made %d model calls and the forks %d, want 1 and 4", w.jobCalls, w.forkRuns)
				}
				if got := out.TotalUsage().Tokens(); got != w.tokens {
					t.Errorf("Output counts %d tokens, the models billed %d", got, w.tokens)
				}
				if limit == "cost" && w.dollars > dollars {
					t.Errorf("the tree cost $%.4f under a limit of $%.2f", w.dollars, dollars)
				}
				if limit == "tokens" && w.tokens > tokens {
					t.Errorf("the tree spent %d tokens under a limit of %d", w.tokens, tokens)
				}
				if out.Answer != "All parts are in." {
					t.Errorf("the lead answered %q, want its own answer", out.Answer)
				}
			})
		}
	}
}

// jobsThenLookups is a lead that starts three background jobs, looks a
// fact up twice while they run (reading their receipts each time), then
// waits for each and answers. Every model bills as the budget estimates
// and writes as much as its call's output bound lets it.
type jobsThenLookups struct {
	ids     int
	fresh   atomic.Int64
	prices  provider.Price
	mu      sync.Mutex
	dollars float64 // billed, all models
}

func (w *jobsThenLookups) bill(req provider.Request, msg provider.Message) provider.Response {
	u := fake.Usage(req, msg)
	w.mu.Lock()
	w.dollars += w.prices.Cost(u)
	w.mu.Unlock()
	return provider.Response{Message: msg, Usage: u, Model: "fake"}
}

func (w *jobsThenLookups) lead(_ context.Context, req provider.Request) (provider.Response, error) {
	const lookups = 2
	steps := 0
	var jobs []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleAssistant {
			steps++
		}
		var r struct {
			JobID string `json:"job_id"`
		}
		if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.JobID != "" {
			jobs = append(jobs, r.JobID)
		}
	}
	var calls []provider.ToolCall
	switch {
	case len(req.Tools) == 0 || steps > lookups+1:
		return w.bill(req, provider.AssistantMessage("All parts are in.")), nil
	case steps == 0:
		for i := range 3 {
			calls = append(calls, spawn(fmt.Sprintf(`{"task":"Survey background part %d, in full.","background":true}`, i)))
		}
	case steps <= lookups:
		calls = []provider.ToolCall{{Name: "lookup", Arguments: json.RawMessage(`{}`)}}
	default:
		for _, id := range jobs {
			args, _ := json.Marshal(map[string]any{"action": "wait", "job_id": id, "timeout_seconds": 600})
			calls = append(calls, provider.ToolCall{Name: subagent.JobsToolName, Arguments: args})
		}
	}
	resumetest.NameCalls(w.ids, calls, &w.fresh)
	return w.bill(req, provider.AssistantMessage("", calls...)), nil
}

func (w *jobsThenLookups) child(_ context.Context, req provider.Request) (provider.Response, error) {
	n := 8000
	if req.MaxTokens > 0 {
		n = req.MaxTokens
	}
	return w.bill(req, provider.AssistantMessage(strings.Repeat("word", n))), nil
}

// Under a cost limit, what a lead spends to look after its background
// jobs (reading their receipts, the calls that collect them) comes out of
// the jobs' shares, as under a token limit, not out of the reserve that
// pays for the lead's last call: a lead that starts three jobs whose
// children spend all they may, looks facts up twice and then collects
// them, collects all three and answers, and the tree costs no more than
// its limit (its models bill as the budget estimates, so the bound adds
// nothing). With models that name their calls afresh, not at all, and from
// call_0.
func TestBackgroundJobsBookkeepingIsReservedUnderACostLimit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	price := provider.Price{Input: 1e-6, Output: 4e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": price})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 0.02
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprintf("ids %d", ids), func(t *testing.T) {
			w := &jobsThenLookups{ids: ids, prices: price}
			p := fake.NewProvider(fake.Respond(w.lead).For("lead"), fake.Respond(w.child).For(subagent.DefaultForkName)).Loop().Named("fake", "fake")
			reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
			out, err := lead(t, p, reg, agent.WithPrices(prices), agent.WithCostLimit(limit)).Run(t.Context(), agent.Input{Text: "Write the survey."})
			if err != nil {
				t.Fatalf("the lead failed: %v", err)
			}
			collected := 0
			for _, c := range toolResults(out.Messages) {
				if strings.Contains(c, "wordword") {
					collected++
				}
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Logf("billed $%.6f in %d model calls; %d jobs collected; answer %q", w.dollars, p.Calls(), collected, out.Answer)
			if w.dollars > limit {
				t.Errorf("the tree cost $%.6f under a limit of $%.2f", w.dollars, limit)
			}
			if math.Abs(out.Cost-w.dollars) > 1e-12 {
				t.Errorf("Output.Cost is $%.6f, the models billed $%.6f", out.Cost, w.dollars)
			}
			if collected != 3 {
				t.Errorf("the lead collected %d of its 3 jobs: looking after them ate the reserve of its last call", collected)
			}
			if out.Answer != "All parts are in." {
				t.Errorf("the lead answered %q, want its own answer", out.Answer)
			}
		})
	}
}
